#!/usr/bin/env bash
# Hierarchical against flat allreduce across simulated nodes (scripts/cluster): 2 nodes x 2 ranks
# joined by a tbf-shaped link (default 1 Gbit/s), float32 sum, 1 KiB to 64 MiB (x4), out-of-place.
# Per size: the median over iterations of the slowest rank's time, pooled over the repeats; each
# repeat runs flat then hierarchical (alternating which goes first). Prints the ratio flat /
# hierarchical per size (> 1: hierarchical is faster).
# Needs root; makes its own cluster (a name of its own) and takes it down however it ends.
#
# Usage: benchmarks/comm/hierarchical_vs_flat.sh [--link-gbit G] [-n ITERS] [-r REPEATS] [-o DIR]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin_dir=${DTUNE_BIN_DIR:-$repo/build/bin}
python=${DTUNE_PYTHON:-$repo/.venv/bin/python}
gbit=1 iters=10 repeats=2 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --link-gbit) gbit=$2; shift 2 ;;
    -n) iters=$2; shift 2 ;;
    -r) repeats=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hierarchical_vs_flat.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
name=hvf$(($$ % 1000000))
work=${out:-$(mktemp -d /tmp/dtune-hvf.XXXXXX)}
mkdir -p "$work"
trap '"$repo/scripts/cluster" down --name "$name" >/dev/null 2>&1 || true' EXIT
"$repo/scripts/cluster" up --nodes 2 --slots 2 --link-gbit "$gbit" --name "$name" | sed -n 1p
state=/run/dtune-cluster/$name
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for ((r = 0; r < repeats; ++r)); do
  order=(flat hierarchical)
  ((r % 2)) && order=(hierarchical flat)
  for a in "${order[@]}"; do
    "${DTUNE_MPIRUN:-mpirun}" --tune "$state/mpirun.tune" --hostfile "$state/hostfile" -np 4 \
      "$bin_dir/dtune-comm" -b 1K -e 64M -f 4 -n "$iters" -w 2 -c 1 --algorithm "$a" \
      --output "$work/$a-$r.h5" --overwrite >"$work/$a-$r.txt"
  done
done
"$python" - "$work" <<'PY'
import glob
import sys

import h5py
import numpy as np

work = sys.argv[1]


def medians(algo):
    per_size = {}
    for path in sorted(glob.glob(f"{work}/{algo}-*.h5")):
        with h5py.File(path) as f:
            (g,) = f["runs"].values()
            assert (g["wrong"][0] == 0).all(), f"{path}: wrong elements"
            for s, size in enumerate(g["size_bytes"][:]):
                slowest = np.nanmax(g["time_us"][0, s], axis=0)  # (R, I) -> per iteration
                per_size.setdefault(int(size), []).extend(slowest.tolist())
    return {s: float(np.median(v)) for s, v in per_size.items()}


flat, hier = medians("flat"), medians("hierarchical")
print(f"# {'size':>10} {'flat_us':>12} {'hier_us':>12} {'flat/hier':>9}")
for s in sorted(flat):
    print(f"  {s:>10} {flat[s]:>12.1f} {hier[s]:>12.1f} {flat[s] / hier[s]:>9.2f}")
print(f"# files: {work}")
PY
