#!/usr/bin/env bash
# The README's test command: sets everything up (scripts/setup.sh), lints the Python (ruff check and
# ruff format --check over the packages and the tests, configured in pyproject.toml), then runs the
# whole test suite (ctest: unit, mpi, smoke; gpu tests skip themselves visibly without a GPU). Extra
# arguments go to ctest, e.g. scripts/test.sh -L unit.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/setup.sh"
python_code=(report sweeps tests)
ruff="$repo/.venv/bin/ruff"
if ! (cd "$repo" && "$ruff" check -q --output-format concise "${python_code[@]}" &&
      "$ruff" format -q --check "${python_code[@]}"); then
  echo "test.sh: the Python code fails ruff (above); fix it with" >&2
  echo "  .venv/bin/ruff check --fix ${python_code[*]} && .venv/bin/ruff format ${python_code[*]}" >&2
  exit 1
fi
if [[ $(id -u) -eq 0 ]]; then
  # Open MPI refuses to run as root unless told; CI runs as root.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
cd "$repo/${DTUNE_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 1200 "$@"
