#!/usr/bin/env bash
# dtune-comm's measurement overhead: its median allreduce time against a minimal hand-written
# MPI_Allreduce loop (minimal_allreduce.c) on 2 ranks, float32 sum, out-of-place, at 8 B, 64 KiB,
# 1 MiB and 64 MiB. Targets: ratio <= 1.03 from 64 KiB up, difference <= 1 us at 8 B.
# Both sides use one statistic: the median over iterations of rank 0's per-iteration times (dtune's
# read from its HDF5 file with report/dtune_report). Exit 0: targets met; 1: a target missed.
#
# Usage: benchmarks/comm/overhead_vs_minimal.sh [-n ITERS] [-w WARMUP] [-k]
#   -n  timed iterations for every size (default 200 up to 1 MiB, 50 at 64 MiB)
#   -w  warm-up iterations (default 20)
#   -k  keep the temporary directory (dtune's .h5 and csv, the minimal loop's output)
# Env: DTUNE_BIN_DIR (default build/bin), DTUNE_MPIRUN (default mpirun), DTUNE_PYTHON (default
#      .venv/bin/python), MPICC (default mpicc).
# Each size is its own pair of runs (-b S -e S): one -b/-e/-f sweep cannot hit all four sizes
# (-b 8 -f 8 gives 8, 64, 512, 4K, ...) and the 64 MiB point needs fewer iterations to stay fast.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin_dir=${DTUNE_BIN_DIR:-$repo/build/bin}
python=${DTUNE_PYTHON:-$repo/.venv/bin/python}
read -r -a launch <<<"${DTUNE_MPIRUN:-mpirun}"
launch+=(-np 2 --oversubscribe --allow-run-as-root)
sizes=(8 65536 1048576 67108864)
iters_override="" warmup=20 keep=0

usage() { sed -n '8,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "n:w:kh" opt; do
  case $opt in
    n) iters_override=$OPTARG ;;
    w) warmup=$OPTARG ;;
    k) keep=1 ;;
    *) usage ;;
  esac
done
[[ -z $iters_override || $iters_override =~ ^[1-9][0-9]*$ ]] || { echo "-n wants a positive integer, got '$iters_override'" >&2; exit 2; }
[[ $warmup =~ ^[0-9]+$ ]] || { echo "-w wants a non-negative integer, got '$warmup'" >&2; exit 2; }
[[ -x $bin_dir/dtune-comm ]] || { echo "$bin_dir/dtune-comm not found: build first (scripts/setup.sh) or set DTUNE_BIN_DIR" >&2; exit 2; }
[[ -x $python ]] || { echo "$python not found: run scripts/setup.sh or set DTUNE_PYTHON" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dtune-overhead.XXXXXX")
if ((keep)); then echo "# keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

"${MPICC:-mpicc}" -O2 -std=c99 -o "$tmp/minimal_allreduce" "$repo/benchmarks/comm/minimal_allreduce.c"

# Minimal loop first, then dtune, size by size, so slow drift of the machine hits both alike.
for s in "${sizes[@]}"; do
  n=${iters_override:-$((s >= 64 * 1024 * 1024 ? 50 : 200))}
  echo "# size $s: $n iterations, $warmup warm-up" >&2
  (cd "$tmp" && "${launch[@]}" ./minimal_allreduce "$n" "$warmup" "$s" >>minimal.txt)
  (cd "$tmp" && "${launch[@]}" "$bin_dir/dtune-comm" -b "$s" -e "$s" -n "$n" -w "$warmup" -c 0 \
      --format csv --output "$tmp/dtune-$s.h5" >"dtune-$s.csv")
done

PYTHONPATH="$repo/report" "$python" - "$tmp" <<'EOF'
import sys

import numpy as np
from dtune_report import load_comm

tmp = sys.argv[1]
minimal = {int(s): t for s, t in np.loadtxt(f"{tmp}/minimal.txt", ndmin=2)}
df = load_comm(tmp)  # every dtune-<size>.h5 in the directory
df = df[(df["rank"] == 0) & (df["placement"] == "out-of-place") & (df["collective"] == "allreduce")
        & (df["dtype"] == "float32") & (df["op"] == "sum")]
dtune = df.groupby("size_bytes")["time_us"].agg(["median", "size"])
missed = 0
print("# dtune-comm vs minimal MPI_Allreduce loop: 2 ranks, float32 sum, out-of-place,")
print("# median over iterations of rank 0's time per call")
print(f"# {'size_bytes':>10} {'iters':>6} {'dtune_us':>11} {'minimal_us':>11} {'ratio':>7} "
      f"{'diff_us':>9}  {'target':<14} result")
for size, t_min in sorted(minimal.items()):
    t_dt, n = dtune.loc[size, "median"], int(dtune.loc[size, "size"])
    ratio, diff = t_dt / t_min, t_dt - t_min
    if size >= 64 * 1024:
        target, ok = "ratio <= 1.03", ratio <= 1.03
    else:
        target, ok = "diff <= 1 us", diff <= 1.0
    missed += not ok
    print(f"  {size:>10} {n:>6} {t_dt:>11.3f} {t_min:>11.3f} {ratio:>7.3f} {diff:>+9.3f}  "
          f"{target:<14} {'ok' if ok else 'MISSED'}")
sys.exit(1 if missed else 0)
EOF
