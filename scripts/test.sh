#!/usr/bin/env bash
# The README's test command: sets everything up (scripts/setup.sh), lints the Python (ruff check and
# ruff format --check over the packages and the tests, configured in pyproject.toml), checks the
# C++ formatting (clang-format --dry-run --Werror with .clang-format), then runs the
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
# The C++ follows .clang-format (Google based, 100 columns; Debian's clang-format 14).
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t cxx_code < <(git -C "$repo" ls-files -- '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t cxx_code < <(cd "$repo" && find core models data train kernels benchmarks tests -type f \
                            \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null)
fi
if ! fmt_out=$(cd "$repo" && clang-format --dry-run --Werror "${cxx_code[@]}" 2>&1); then
  printf '%s\n' "$fmt_out" | head -20 >&2
  echo "test.sh: the C++ code is not formatted as .clang-format says (above); fix it with" >&2
  echo "  git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i" >&2
  exit 1
fi
if [[ $(id -u) -eq 0 ]]; then
  # Open MPI refuses to run as root unless told; CI runs as root.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# numpy's OpenBLAS starts a thread per core at import, in each of the suite's hundreds of Python
# processes (dtune commands, the synthetic trainer), and no test does linear algebra big enough to
# use them: one thread took smoke.sweeps.tune from 134 to 115 CPU seconds.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
cd "$repo/${DTUNE_BUILD_DIR:-build}"
# JUnit with every test's time (ctest-junit.xml in the build directory, for CI dashboards), then
# the fifteen slowest tests, whatever the outcome. Tests run side by side, 2 per core by default
# (DTUNE_TEST_JOBS): most of a test's time is process start-up and waiting on its ranks, and on
# 2 cores -j4 took the suite from 1358 s to 660 s; the longest start first (tests/costs.cmake),
# an mpirun test (dtune_mpi_test) takes its N ranks' slots (PROCESSORS; the pytest-driven MPI
# tests take one, but mpi.pipeline_bubble, which times its 4 ranks, takes 4), Slurm and cluster tests lock each other
# out (RESOURCE_LOCK) and cluster.bandwidth (the shaped link's rate) runs alone.
jobs=${DTUNE_TEST_JOBS:-$((2 * $(nproc)))}
rc=0
ctest --output-on-failure --timeout 1200 -j "$jobs" --output-junit ctest-junit.xml "$@" || rc=$?
"$repo/.venv/bin/python" - ctest-junit.xml <<'PY' || true
import sys
import xml.etree.ElementTree as ET

cases = [(float(c.get("time", 0)), c.get("name"), c.get("status", "")) for c in ET.parse(sys.argv[1]).iter("testcase")]
print("\nThe fifteen slowest tests:")
for t, name, status in sorted(cases, reverse=True)[:15]:
    print(f"  {t:8.1f} s  {name}  ({status})")
PY
exit "$rc"
