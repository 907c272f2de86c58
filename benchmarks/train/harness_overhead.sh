#!/usr/bin/env bash
# dtune-train's timing overhead: the same binary, model and steps with every phase clocked
# (--timing on) against the bare loop that takes only each step's total (--timing off), 1 rank.
# Target: on - off < 1% of the step time.
# Statistic: a run's median step time (HDF5 attribute step_time_p50_ms); difference per pair
# (on - off) / off in %, then the median over pairs (range: per-pair differences). Each pair is two
# fresh launches back to back, alternating which goes first, so drift of the machine hits both.
#
# Usage: benchmarks/train/harness_overhead.sh [-s STEPS] [-w WARMUP] [-r REPEATS] [-k] [-- ARGS]
#   -s  measured steps per run (default 60)
#   -w  warm-up steps (default 10)
#   -r  pairs of runs (default 12: even on an idle 2-core VM one run's median moves 10-30% from
#       the next, far more than the 1% target, so many short pairs beat a few long ones)
#   -k  keep the temporary directory (the .h5 files)
#   ARGS  dtune-train arguments for both sides (default: --model gpt2-tiny --context 128 --batch 8
#         --threads 1: a short step, so a fixed per-step cost weighs most; 1 thread, so OpenMP
#         barriers on a shared machine add less noise)
# Env: DTUNE_BIN_DIR (default build/bin), DTUNE_PYTHON (default .venv/bin/python).
# Exit 0 whether or not the target is met (a benchmark, not a test); 2 on bad usage or a failed run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin_dir=${DTUNE_BIN_DIR:-$repo/build/bin}
python=${DTUNE_PYTHON:-$repo/.venv/bin/python}
steps=60 warmup=10 repeats=12 keep=0

usage() { sed -n '9,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "s:w:r:kh" opt; do
  case $opt in
    s) steps=$OPTARG ;;
    w) warmup=$OPTARG ;;
    r) repeats=$OPTARG ;;
    k) keep=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
args=("$@")
((${#args[@]})) || args=(--model gpt2-tiny --context 128 --batch 8 --threads 1)
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "-s wants a positive integer, got '$steps'" >&2; exit 2; }
[[ $warmup =~ ^[0-9]+$ ]] || { echo "-w wants a non-negative integer, got '$warmup'" >&2; exit 2; }
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "-r wants a positive integer, got '$repeats'" >&2; exit 2; }
exe=$bin_dir/dtune-train
[[ -x $exe ]] || { echo "$exe not found: build first (scripts/setup.sh) or set DTUNE_BIN_DIR" >&2; exit 2; }
"$exe" --help | grep -q -- '--timing' || { echo "$exe has no --timing: rebuild it" >&2; exit 2; }
[[ -x $python ]] || { echo "$python not found: run scripts/setup.sh or set DTUNE_PYTHON" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtune-harness.XXXXXX")
if ((keep)); then echo "# keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi

run() {  # REPEAT on|off: writes $tmp/REPEAT-on|off.h5
  "$exe" "${args[@]}" --steps "$steps" --warmup-steps "$warmup" --timing "$2" \
    --output "$tmp/$1-$2.h5" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log" >&2; exit 2; }
}
echo "# dtune-train ${args[*]}: $repeats pairs x $steps steps after $warmup warm-up" >&2
for ((r = 0; r < repeats; r++)); do
  if ((r % 2)); then run "$r" off; run "$r" on; else run "$r" on; run "$r" off; fi
done

"$python" - "$tmp" "$repeats" <<'EOF'
import statistics
import sys

import h5py

tmp, repeats = sys.argv[1], int(sys.argv[2])


def p50_ms(path):
    with h5py.File(path) as f:
        (run,) = f["runs"].values()
        return float(run.attrs["step_time_p50_ms"])


on = [p50_ms(f"{tmp}/{r}-on.h5") for r in range(repeats)]
off = [p50_ms(f"{tmp}/{r}-off.h5") for r in range(repeats)]
diffs = [100 * (a - b) / b for a, b in zip(on, off)]
diff = statistics.median(diffs)
print("# dtune-train --timing on vs off, 1 rank: median step time per run, then median over pairs")
print(f"# {'pairs':>5} {'on_ms':>9} {'off_ms':>9} {'diff_pct':>9} {'diff_range_pct':>16}  {'target':<10} result")
print(f"  {repeats:>5} {statistics.median(on):>9.3f} {statistics.median(off):>9.3f} {diff:>+9.2f} "
      f"{f'{min(diffs):+.2f}..{max(diffs):+.2f}':>16}  {'< 1%':<10} {'ok' if diff < 1.0 else 'MISSED'}")
# The median of n pair differences is known to about 1.25 * stdev / sqrt(n) (its standard error).
if repeats > 2 and (se := 1.25 * statistics.stdev(diffs) / repeats ** 0.5) > 0.5:
    print(f"# warning: noise: the median difference is known to about +-{se:.1f}% (standard error), "
          f"so this run cannot resolve the 1% target; use an idle machine or more pairs (-r)")
EOF
