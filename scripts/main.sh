#!/usr/bin/env bash
# The README's main command: sets everything up (scripts/setup.sh, building only the binaries the
# main job runs; scripts/test.sh builds the rest), measures this machine's GEMM peak (dtune-probe
# gemm, for MFU, in the precisions the quickstart sweep uses, at most --max-seconds per precision)
# and memory bandwidth (dtune-probe memory, the report's busbw ceiling) and runs the main job, the
# quickstart sweep (sweeps/quickstart.yaml: dtune-comm over sizes and MPI transports, dtune-train on
# the tiny ResNet and GPT over batch, precision and bucket size, the tiny GPT as DDP, ZeRO-3 and a
# 2-stage pipeline at one global batch, and the tiny ResNet on JPEG shards
# over loader workers, 2 ranks each), merges its points into one HDF5 file, prints a summary read
# back from that file, and ends with the HTML report (what to change against the baseline, with
# intervals, evidence and the commands that reproduce it) and where it is. Every step prints a line
# at least every 10 seconds, with the time so far and an estimate of what is left
# (scripts/progress.sh).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/progress.sh
source "$repo/scripts/progress.sh"
steps=(setup probe-gemm probe-memory sweep merge report)
[[ -f results/data/quickstart-images/dataset.json ]] || steps=(setup dataset "${steps[@]:1}")
progress_begin ${#steps[@]}
# First-run guesses on a 2-core machine (later runs use this machine's own times).
expect setup 540
expect dataset 5
expect probe-gemm 50
expect probe-memory 10
expect sweep 60
expect merge 10
expect report 30
progress_plan "${steps[@]}"
# The main job's binaries only: the test command builds every target.
export DTUNE_BUILD_TARGETS="${DTUNE_BUILD_TARGETS:-dtune-comm dtune-train dtune-data dtune-probe}"
step setup "$repo/scripts/setup.sh"
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out="results/sweeps/quickstart-$(date -u +%Y%m%d-%H%M%S)"
# The dataset the data-loading points read (made once; JPEG shards with class structure).
if [[ ! -f results/data/quickstart-images/dataset.json ]]; then
  step dataset build/bin/dtune-data make images --out results/data/quickstart-images --samples 256 \
    --width 160 --height 120 --shard-samples 64 --classes 10
fi
# This machine's GEMM peak first (dtune-probe gemm on the device dtune-train will use), so that
# the report's MFU is a number: where no datasheet knows the device, dtune-train takes the newest
# results/dtune-probe-*.h5 (its source then reads "measured (dtune-probe gemm)"). Only the
# precisions the quickstart trains in, each bounded: on a CPU without fp16 kernels torch's
# reference fp16 product runs at a few GFLOP/s, and its 2048^3 shape alone would take minutes.
precisions=$(.venv/bin/python - sweeps/quickstart.yaml <<'PY'
import sys, yaml
found = []
for s in yaml.safe_load(open(sys.argv[1]))["sweeps"]:
    if s.get("binary") != "dtune-train":
        continue
    args = s.get("args", [])
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--precision"]
    values += (s.get("axes") or {}).get("--precision", [])
    found += [str(v) for v in values] or ["fp32"]
print(",".join(dict.fromkeys(v for v in found if v != "tf32")))
PY
)
step probe-gemm build/bin/dtune-probe gemm --dtype "$precisions" --max-seconds 15
# And its host memory bandwidth (STREAM), the ceiling the report reads MPI's shared-memory busbw
# against (there is no link between ranks on one machine). 256 MiB arrays, three of them past the
# caches of most machines, take seconds; the default (4x the caches, STREAM's rule) takes minutes
# on a machine with a large L3.
memory_log=$(mktemp)
trap 'rm -f "$memory_log"' EXIT
step probe-memory bash -c 'build/bin/dtune-probe memory -n 3 --array-size 256M | tee "$1"' _ "$memory_log"
memory=$(sed -n 's/^# results: //p' "$memory_log")
step sweep scripts/dtune sweep run sweeps/quickstart.yaml --out "$out"
step merge scripts/dtune sweep merge sweeps/quickstart.yaml --out "$out"
PYTHONPATH="$repo/report" .venv/bin/python - "$out/merged.h5" <<'PY'
import json, sys
import h5py
from dtune_report.loader import load_comm_summary, load_train_summary
path = sys.argv[1]
with h5py.File(path) as f:  # which MPI transport each merged run used (its sweep point's env)
    btl = {name: json.loads(g.attrs["point"])["env"].get("OMPI_MCA_btl", "default") for name, g in f["runs"].items()}
comm = load_comm_summary(path)
big = comm[comm.placement == "out-of-place"].sort_values("size_bytes").groupby(["run", "collective"]).tail(1)
print(f"\nResults: {path}")
for _, r in big.iterrows():
    print(f"  {r.collective:>10s} {int(r.size_bytes) >> 20} MiB, btl {btl[r.run]:<11s}: busbw {r.busbw_gbps:6.2f} GB/s")
train = load_train_summary(path)
for _, r in train.iterrows():
    data = "" if r.get("data", "synthetic") == "synthetic" else f", JPEG shards via {int(r.workers)} workers"
    if r.get("pipeline_stages", 1) > 1:
        data += f", pipeline of {int(r.pipeline_stages)} stages x {int(r.micro_batches)} micro-batches"
    elif r.get("accum_steps", 1) > 1:
        data += f", {int(r.accum_steps)} micro-batches"
    # An MFU above 100% is never printed: dtune-train rejects a peak below what the run achieved
    # (mfu_valid 0) and falls back to the next source, or to none (n/a).
    mfu = f"{r.mfu:6.1%}" if r.mfu == r.mfu and r.mfu <= 1 else "   n/a"
    if r.get("mfu_valid", 1) == 0:
        mfu += f" [a peak below the achieved rate was rejected: {str(r.mfu_rejected_peaks).split(':')[0]}]"
    print(f"  {r.model:>10s} batch {int(r.batch):3d}/rank {r.precision:>4s} buckets {r.bucket_mb:5g} MiB{data}: "
          f"{r.samples_per_s:8.1f} samples/s, step p50 {r.step_time_p50_ms:6.1f} ms, MFU {mfu}")
PY
step report scripts/dtune report "$out/merged.h5" "$memory" -o "$out/report"
progress_end
