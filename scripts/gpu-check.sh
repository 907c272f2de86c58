#!/usr/bin/env bash
# dtune's GPU validation: one command on a GPU machine that has a torch wheel but no MPI, no HDF5
# and no network, run with the bundle (scripts/gpu-bundle.sh, .gpu/) carried beside the sources.
#
#   bash scripts/gpu-check.sh [OUT_DIR] [--budget SECONDS] [--rehearsal]
#
# It first checks the machine's facts (x86-64, glibc, python3's torch against the bundle's, a
# CUDA 13 torch, the nvidia-* libraries, a GPU, every bundled binary's libraries resolving) and
# stops at the first wrong one with a line saying what to fix (exit 2). Then, within the budget
# (default 480 s), each step under its own time limit, a failed step not stopping the others:
#   the gpu test label; dtune-comm --backend nccl on one rank, 8 B to 1 GiB; dtune-train
#   ResNet-50 224x224 channels_last in bf16 and fp16 at the largest power-of-two batch that fits
#   (--batch auto finds the largest batch), GPT-2 d12 bf16 at context
#   1024, each with its phase breakdown and MFU; one --profile-steps window with CUDA activities;
#   ResNet-50 on JPEG shards made there by dtune-data, with 8 and 14 loader workers against
#   synthetic data; dtune-probe when the bundle has it.
# OUT_DIR (default $OUT, else results/gpu-check-<time>) receives at most 8 files: gpu-check.log
# (everything printed), summary.txt (facts, steps, headline figures), results.h5 (every run, merged
# as a sweep merge is, for `scripts/dtune report`), the profiler's trace (gzip) and a test log.
#
# --rehearsal runs the same script on a machine without a GPU: the CUDA steps are skipped (said so),
# the rest run on the CPU at tiny sizes, so that every library the bundle lacks would show.
# tests/bundle runs it that way in a mount namespace where the system's MPI, HDF5, curl, JPEG and
# hwloc libraries and the project's venv are hidden.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=""
budget=480
rehearsal=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --rehearsal) rehearsal=1; shift ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
out=${out:-${OUT:-$repo/results/gpu-check-$(date -u +%Y%m%d-%H%M%S)}}
mkdir -p "$out" || { echo "gpu-check.sh: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dtune-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$out/gpu-check.log"
summary="$out/summary.txt"
: >"$summary"
exec > >(tee -a "$log") 2>&1
start=$SECONDS
say() { echo "gpu-check: $*"; }
note() { echo "$*" >>"$summary"; say "$*"; }
wrong() {  # a fact that is wrong: say what to fix and stop
  note "FACT WRONG: $1"
  note "  fix: $2"
  exit 2
}

# --- 1. Facts --------------------------------------------------------------------------------
bundle=${DTUNE_GPU_BUNDLE:-$repo/.gpu}
note "# dtune gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($([[ $rehearsal == 1 ]] && echo rehearsal, no GPU expected || echo GPU run))"
[[ -f "$bundle/MANIFEST" ]] ||
  wrong "no bundle at $bundle" "build it on the dev machine (bash scripts/gpu-bundle.sh) and carry .gpu"
# shellcheck disable=SC1091
source <(grep -E '^(torch_version|glibc_min|commit)=' "$bundle/MANIFEST")
note "bundle: commit $commit, built against torch $torch_version, needs glibc >= $glibc_min"
[[ $(uname -m) == x86_64 ]] || wrong "machine is $(uname -m)" "the bundle is built for x86_64"
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [[ -z "$glibc" || $(printf '%s\n%s\n' "$glibc_min" "$glibc" | sort -V | head -1) != "$glibc_min" ]]; then
  wrong "glibc ${glibc:-unknown} is older than the bundle's $glibc_min" "build the bundle on a machine with glibc <= $glibc"
fi
note "glibc $glibc, $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
py=${DTUNE_PYTHON:-python3}
if [[ -z "${DTUNE_PYTHON:-}" ]] && ! "$py" -c 'import importlib.util as u; exit(u.find_spec("torch") is None)' 2>/dev/null &&
   [[ -x /opt/torch/.venv/bin/python3 ]]; then
  py=/opt/torch/.venv/bin/python3  # where the GPU machines keep their torch
fi
command -v "$py" >/dev/null || wrong "no $py on PATH" "put the torch venv's python3 on PATH or set DTUNE_PYTHON"
export DTUNE_PYTHON=$py
facts=$("$py" - 2>&1 <<'PY'
import importlib.metadata as md, importlib.util, pathlib, re, sys
spec = importlib.util.find_spec("torch")
if spec is None:
    sys.exit("no torch")
print("python", sys.version.split()[0], sys.executable)
print("torch", md.version("torch"))
text = (pathlib.Path(spec.origin).parent / "version.py").read_text()
m = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*'([^']*)'", text, re.M)
print("torch_cuda", m.group(1) if m else "none")
for mod in ("h5py", "numpy"):
    print(mod, md.version(mod) if importlib.util.find_spec(mod) else "missing")
PY
) || wrong "$py cannot report its torch: $facts" "use the python3 that has torch (DTUNE_PYTHON=...)"
fact() { awk -v k="$1" '$1 == k {print $2}' <<<"$facts"; }
note "$(grep '^python' <<<"$facts"); torch $(fact torch) (CUDA $(fact torch_cuda)); h5py $(fact h5py); numpy $(fact numpy)"
[[ "$(fact torch)" == "$torch_version"* ]] ||
  wrong "python3's torch is $(fact torch), the bundle was built against $torch_version" \
    "rebuild the bundle against torch $(fact torch) (requirements.txt), or use that torch here"
[[ "$(fact torch_cuda)" == 13.* ]] || wrong "python3's torch is built for CUDA '$(fact torch_cuda)'" "a CUDA 13 torch wheel (torch $torch_version+cu130)"
[[ "$(fact h5py)" != missing ]] || wrong "python3 has no h5py" "pip install h5py into that venv (the results are merged with it)"
# shellcheck disable=SC1091
source "$bundle/env.sh" || wrong "the bundle's env.sh failed (above)" "check python3's torch"
for lib in libcudart.so.13 libnccl.so.2; do
  found=""
  IFS=: read -ra dirs <<<"$LD_LIBRARY_PATH"
  for d in "${dirs[@]}"; do [[ -e "$d/$lib" ]] && found="$d/$lib" && break; done
  [[ -n "$found" ]] || wrong "$lib is not in torch's nvidia-* wheels" "install the nvidia-* CUDA 13 wheels torch $torch_version depends on"
done
# Every bundled program's libraries, as the loader resolves them (a library missing, or one it finds
# but cannot load), then each tool actually started (--version loads everything it links; the
# loader's own failure is exit 127).
unresolved=$(for b in "$bundle"/bin/* "$bundle"/ompi/bin/orte*; do
               ldd "$b" 2>&1 | grep -E 'not found|error|too short' | sed "s|^|$(basename "$b"): |"
             done | grep -v 'libcuda.so' | sort -u)
if [[ -z "$unresolved" ]]; then
  unresolved=$(for b in "$bundle"/bin/dtune-*; do
                 rc=0
                 timeout 60 "$b" --version >/dev/null 2>"$work/version.err" || rc=$?
                 if ((rc == 127)) || grep -q 'error while loading shared libraries' "$work/version.err"; then
                   echo "$(basename "$b"): $(head -c 300 "$work/version.err")"
                 fi
               done)
fi
[[ -z "$unresolved" ]] || wrong "libraries do not resolve: $(tr '\n' ';' <<<"$unresolved")" \
  "rebuild the bundle (scripts/gpu-bundle.sh) on the dev machine; report which library was missing"
if [[ $rehearsal == 0 ]]; then
  command -v nvidia-smi >/dev/null || wrong "no nvidia-smi" "a machine with the NVIDIA driver"
  gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1) ||
    wrong "nvidia-smi fails: $gpus" "a working NVIDIA driver"
  [[ -n "$gpus" ]] || wrong "no GPU visible" "a GPU machine (CUDA_VISIBLE_DEVICES?)"
  note "GPUs: $(tr '\n' ';' <<<"$gpus")"
  [[ "$gpus" == *H200* ]] || note "note: not an H200; the anchors in the README are H200 figures"
  device=cuda
else
  device=cpu
fi
note "facts: ok ($((SECONDS - start)) s)"

# --- 2. Steps ---------------------------------------------------------------------------------
results="$work/runs"
mkdir -p "$results"
printf '%-28s %-8s %6s  %s\n' step status seconds note >"$work/steps"
failed=0
last_rc=0
# step NAME LIMIT_SECONDS CMD...: runs CMD under the time left (at most LIMIT), logs its outcome.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  if ((left < 15)); then
    printf '%-28s %-8s %6s  %s\n' "$name" no-time 0 "budget of $budget s spent" >>"$work/steps"
    last_rc=0
    say "--- $name: not run, the budget is spent"
    return
  fi
  ((limit > left)) && limit=$left
  say "--- $name (at most $limit s): $*"
  local t0=$SECONDS rc=0
  : >"$work/step.out"
  timeout --kill-after=10 "$limit" "$@" > >(tee "$work/step.out") 2>&1 || rc=$?
  sleep 0.2  # tee's last lines
  grep -E '^# (dtune-train:|throughput|MFU|peak memory|--batch auto|Out of bounds|Avg bus bandwidth)' "$work/step.out" |
    sed "s|^|$name: |" >>"$work/headlines"
  local status=ok why=""
  case $rc in
    0) ;;
    77) status=skipped why="skipped itself (see its output)" ;;
    124|137) status=timeout why="over its $limit s"; failed=1 ;;
    *) status=failed why="exit $rc"; failed=1 ;;
  esac
  printf '%-28s %-8s %6s  %s\n' "$name" "$status" "$((SECONDS - t0))" "$why" >>"$work/steps"
  say "--- $name: $status ${why:+($why)}"
  last_rc=$rc
}
skip() { printf '%-28s %-8s %6s  %s\n' "$1" skipped 0 "$2" >>"$work/steps"; say "--- $1: skipped ($2)"; }
train() {  # train NAME LIMIT ARGS...: dtune-train with its HDF5 in the work folder
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" dtune-train --output "$results/$name.h5" --timeout 120 "$@"
}

# The gpu label: the gtest binaries with the filters ctest gives them, then the Python gpu tests.
if [[ $rehearsal == 0 ]]; then
  step gpu.nccl_backend.allreduce 60 test_nccl_backend --gtest_filter='*AllreduceSumFloat32IsExact'
else
  step gpu.nccl_backend.no_gpu 60 test_nccl_backend --gtest_filter='*WithoutGpuFailsWithClearMessage'
fi
# (240 s: on two GPUs the pipeline tests alone launch dtune-train ~10 times, ~10 s each with CUDA and
# NCCL set-up, and wait ~45 s for a stopped stage to time out.)
step gpu.python_tests 240 "$py" -m pytest -q -rs -p no:cacheprovider "$repo/tests/gpu" \
  --junitxml="$out/gpu-tests.xml"

if [[ $rehearsal == 0 ]]; then
  step comm.nccl_1rank 90 dtune-comm --backend nccl -b 8 -e 1G -f 2 -n 20 -w 5 --output "$results/comm-nccl.h5"
else
  skip comm.nccl_1rank "rehearsal: no GPU"
  # The bundled mpirun, two ranks over shared memory: Open MPI's runtime is in the bundle.
  step comm.mpi_2ranks 90 mpirun -np 2 --oversubscribe dtune-comm -b 8 -e 1M -f 4 -n 5 -w 1 \
    --output "$results/comm-mpi.h5"
fi

if [[ $rehearsal == 0 ]]; then
  resnet=(--model resnet50 --image-size 224 --channels-last --device cuda --steps 30 --warmup-steps 5)
  # --batch auto finds the largest batch that fits; the runs use the largest power of two below it
  # (fp16 at half that if it does not fit: exit 4 is out of memory).
  step resnet50.batch_auto 180 dtune-train "${resnet[@]}" --precision bf16 --batch auto --steps 1 \
    --warmup-steps 0 --no-output
  largest=$(sed -n 's/^# --batch auto: \([0-9]*\) samples per rank.*/\1/p' "$work/step.out")
  pow2=256
  if [[ -n "$largest" ]]; then pow2=1; while ((pow2 * 2 <= largest)); do pow2=$((pow2 * 2)); done; fi
  note "ResNet-50 bf16: largest batch that fits ${largest:-unknown}; the runs use $pow2"
  train resnet50.bf16 120 "${resnet[@]}" --precision bf16 --batch "$pow2"
  train resnet50.fp16 120 "${resnet[@]}" --precision fp16 --batch "$pow2"
  if [[ $last_rc == 4 ]]; then train resnet50.fp16.half 120 "${resnet[@]}" --precision fp16 --batch $((pow2 / 2)); fi
  train gpt2-d12.bf16 90 --model gpt2-d12 --context 1024 --device cuda --precision bf16 --batch 32 \
    --steps 30 --warmup-steps 5
  train resnet50.profile 90 "${resnet[@]}" --precision bf16 --batch 128 --steps 6 --warmup-steps 2 \
    --profile-steps 3:2 --profile-dir "$work/profile"
else
  resnet=(--model resnet18 --width 8 --image-size 32 --num-classes 10 --channels-last --device cpu
          --steps 2 --warmup-steps 1)
  train resnet.cpu 90 "${resnet[@]}" --batch 8
  train gpt2-tiny.cpu 90 --model gpt2-tiny --device cpu --batch 4 --steps 2 --warmup-steps 1
  train resnet.profile 90 "${resnet[@]}" --batch 8 --profile-steps 1:1 --profile-dir "$work/profile"
fi

# The data stall: JPEG shards made here, read by 8 and 14 loader workers, against synthetic data.
if [[ $rehearsal == 0 ]]; then
  step data.make 90 dtune-data make images --out "$work/images" --samples 4096 --width 256 --height 256 \
    --shard-samples 512 --classes 100
  jpeg=(--model resnet50 --image-size 224 --num-classes 100 --channels-last --device cuda --precision bf16
        --batch 256 --steps 20 --warmup-steps 3)
  for w in 8 14; do train "resnet50.jpeg.w$w" 90 "${jpeg[@]}" --data "$work/images" --workers "$w"; done
  train resnet50.synthetic 60 "${jpeg[@]}"
else
  step data.make 60 dtune-data make images --out "$work/images" --samples 64 --width 40 --height 40 \
    --shard-samples 32 --classes 10
  train resnet.jpeg.w2 90 "${resnet[@]}" --batch 8 --data "$work/images" --workers 2
fi

if [[ -x "$bundle/bin/dtune-probe" ]]; then
  for p in topology gemm memory copy launch; do
    step "probe.$p" 60 dtune-probe "$p" --output "$results/probe-$p.h5"
  done
else
  skip probe "this bundle has no dtune-probe"
fi

# --- 3. What comes back -----------------------------------------------------------------------
# Every run of this check in one file, laid out as `dtune sweep merge` writes it.
PYTHONPATH="$repo/sweeps" "$py" -m dtune_sweep.point_copy "$out/results.h5" "$results"/*.h5 || failed=1
if [[ -d "$work/profile" ]]; then
  for t in "$work"/profile/rank0*.json; do
    [[ -f "$t" ]] && gzip -c "$t" >"$out/$(basename "$t").gz"
  done
fi
{
  echo
  echo "## steps ($((SECONDS - start)) s of a $budget s budget)"
  cat "$work/steps"
  echo
  echo "## headline lines"
  cat "$work/headlines" 2>/dev/null
} >>"$summary"
cat "$work/steps"
for f in "$out"/*; do
  sz=$(stat -c %s "$f")
  ((sz > 16 * 1024 * 1024)) && say "warning: $(basename "$f") is $((sz >> 20)) MiB, above what comes back (16 MiB)"
done
say "output in $out: $(cd "$out" && ls | tr '\n' ' ')"
say "turn it into a report on the dev machine: scripts/dtune report $out/results.h5 -o $out/report"
exit $failed
