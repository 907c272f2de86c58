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
# A main job stopped before its report (Ctrl-C, a lost connection, a full disk) left its sweep
# folder in results/sweeps/.main-unfinished: the rerun resumes that sweep (its finished points are
# kept) instead of starting a new one. The file is read as data: anything but the name of an
# existing quickstart folder is ignored.
unfinished=results/sweeps/.main-unfinished
out=""
if [[ -f "$unfinished" ]]; then
  earlier=$(head -c 200 "$unfinished" | head -n 1)
  if [[ "$earlier" =~ ^results/sweeps/quickstart-[0-9]{8}-[0-9]{6}$ && -d "$earlier" ]]; then
    out=$earlier
    progress_say "resuming the main job stopped before its report: $out (its finished points are kept)"
  fi
fi
if [[ -z "$out" ]]; then
  out="results/sweeps/quickstart-$(date -u +%Y%m%d-%H%M%S)"
  mkdir -p results/sweeps
  echo "$out" >"$unfinished.tmp" && mv "$unfinished.tmp" "$unfinished"
fi
stopped() {  # stopped STATUS: on the way out, what a rerun does
  (($1 == 0)) || progress_say "stopped (exit $1): rerun bash scripts/main.sh to resume $out"
}
trap 'stopped $?' EXIT
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
trap 'rc=$?; rm -f "$memory_log"; stopped $rc' EXIT
step probe-memory bash -c 'build/bin/dtune-probe memory -n 3 --array-size 256M | tee "$1"' _ "$memory_log"
memory=$(sed -n 's/^# results: //p' "$memory_log")
step sweep scripts/dtune sweep run sweeps/quickstart.yaml --out "$out"
step merge scripts/dtune sweep merge sweeps/quickstart.yaml --out "$out"
# The summary, read back from the merged file (report/dtune_report/main_summary.py).
PYTHONPATH="$repo/report" .venv/bin/python -m dtune_report.main_summary "$out/merged.h5"
step report scripts/dtune report "$out/merged.h5" "$memory" -o "$out/report"
rm -f "$unfinished"
progress_end
