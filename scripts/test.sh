#!/usr/bin/env bash
# The README's test command: sets everything up (scripts/setup.sh) and runs the whole test suite
# (ctest: unit, mpi, smoke; gpu tests skip themselves visibly without a GPU). Extra arguments go
# to ctest, e.g. scripts/test.sh -L unit.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/setup.sh"
if [[ $(id -u) -eq 0 ]]; then
  # Open MPI refuses to run as root unless told; CI runs as root.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
cd "$repo/${DTUNE_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 1200 "$@"
