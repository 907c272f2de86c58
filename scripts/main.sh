#!/usr/bin/env bash
# The README's main command: sets everything up (scripts/setup.sh) and runs the main job. Until
# the sweep and report issues land, that is a default dtune-comm run on this machine: allreduce,
# allgather and reduce_scatter from 8 B to 64 MiB on 2 ranks (or DTUNE_NP), every result checked,
# written to results/ as HDF5 and summarised from that file with the Python loader.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/setup.sh"
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
cd "$repo"
np=${DTUNE_NP:-2}
out="results/comm-default-$(date -u +%Y%m%d-%H%M%S).h5"
mpirun -np "$np" --oversubscribe build/bin/dtune-comm -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 \
  --collective allreduce,allgather,reduce_scatter --output "$out"
PYTHONPATH="$repo/report" .venv/bin/python - "$out" <<'PY'
import sys
from dtune_report.loader import load_comm_summary, read_provenance
path = sys.argv[1]
s = load_comm_summary(path)
prov = read_provenance(path)
big = s[(s.placement == "out-of-place")].sort_values("size_bytes").groupby("collective").tail(1)
print(f"\nResults file: {path}  (hosts: {sorted(set(prov['rank_host']))}, status: {prov.get('status', '?')})")
for _, r in big.iterrows():
    print(f"  {r.collective:>15s} at {int(r.size_bytes) >> 20} MiB: busbw {r.busbw_gbps:.2f} GB/s, "
          f"time {r.time_us_reported:.0f} us")
PY
