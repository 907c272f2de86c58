#!/usr/bin/env bash
# dtune's GPU validation: one command on a GPU machine that has a torch wheel but no MPI, no HDF5
# and no network, run with the bundle (scripts/gpu-bundle.sh, .gpu/) carried beside the sources.
#
#   bash scripts/gpu-check.sh [OUT_DIR] [--budget SECONDS] [--rehearsal]
#
# It first checks the machine's facts (x86-64, glibc, python3's torch against the bundle's, a
# CUDA 13 torch, the nvidia-* libraries, a GPU, every bundled program's libraries resolving, each
# tool started, each gpu test binary listing the tests ctest runs) and stops at the first wrong one
# with a line saying what to fix (exit 2), all within DTUNE_GPU_FACTS_S (60 s). Then the steps, in
# the order a first GPU run must show them, each under its own time limit (the limits sum to 460
# s: with the facts, within the default budget of 480 s; a step is skipped once the budget is
# spent; a failed step stops no other):
#   1. probes: dtune-probe gemm (bf16, fp16, tf32 at 4096^3 and 8192^3, torch::mm and cuBLASLt),
#      memory (HBM STREAM), copy (H2D and D2H, pinned and pageable, 4K to 1G), launch, topology;
#   2. tests: every gpu-labelled test binary with the gtest filters ctest gives it (the bundle's
#      GPU_TESTS, read from ctest when it was built), then the gpu-labelled Python tests (among
#      them two and four ranks on the one GPU over MPI: DDP, zero1-3, tensor parallelism, the Llama
#      family, local SGD, fp16 with the loss scaler, tests/gpu/test_one_gpu_ranks.py);
#   3. dtune-comm --backend nccl on one rank, 8 B to 1 GiB (and nccl-tests' all_reduce_perf at 8 B
#      when it is on PATH, for the latency anchor);
#   4. dtune-train --backend nccl on one GPU: ResNet-50 224x224 bf16 channels-last at batch 256,
#      GPT-2 d12 bf16 at context 1024 (phase breakdown, MFU), Llama 3.2 1B;
#   5. one --profile-steps window with CUDA activities;
#   6. the loader: JPEG shards made there by dtune-data, read by 8 and 14 workers, and by 8 with
#      --decode nvjpeg (the ResNet-50 bf16 step, at the same batch, is their synthetic-data
#      baseline).
# OUT_DIR (default $OUT, else results/gpu-check-<time>) receives at most 8 files: gpu-check.log
# (everything printed), summary.txt (facts, the step table with each step's limit, the step the
# budget would drop first were every step to take its limit, each step's headline lines, and issue
# 30's anchor figures beside what was measured), results.h5 (every run, merged as a sweep merge
# is, for `scripts/dtune report`), the profiler's trace (gzip) and the
# Python tests' JUnit file.
#
# --rehearsal runs the same steps in the same order on a machine without a GPU: a step that needs
# CUDA runs a CPU stand-in at tiny sizes where there is one, or is skipped, and the table says
# which; the anchors read "not measured". tests/bundle runs it that way in a mount namespace where
# the system's MPI, HDF5, curl, JPEG and hwloc libraries and the project's venv are hidden.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=""
budget=480
rehearsal=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    --rehearsal) rehearsal=1; shift ;;
    -h|--help) sed -n '2,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# --- Facts -------------------------------------------------------------------------------------
bundle=${DTUNE_GPU_BUNDLE:-$repo/.gpu}
note "# dtune gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($([[ $rehearsal == 1 ]] && echo rehearsal, no GPU expected || echo GPU run))"
[[ -f "$bundle/MANIFEST" ]] ||
  wrong "no bundle at $bundle" "build it on the dev machine (bash scripts/gpu-bundle.sh) and carry .gpu"
[[ -f "$bundle/GPU_TESTS" ]] ||
  wrong "the bundle at $bundle has no GPU_TESTS (built before the gpu tests were listed)" "rebuild it (bash scripts/gpu-bundle.sh)"
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
# The facts are bounded too: DTUNE_GPU_FACTS_S (60) in all, each program's start sharing it (a
# start that hangs is itself a wrong fact), so that the steps keep their budget.
facts_limit=${DTUNE_GPU_FACTS_S:-60}
facts_deadline=$((SECONDS + facts_limit))
facts=$(timeout "$facts_limit" "$py" - 2>&1 <<'PY'
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
# but cannot load); then each tool started (--version loads everything it links; the loader's own
# failure is exit 127) and each gpu test binary asked for its tests (--gtest_list_tests), which
# must include every test ctest's filters name.
gtests=$(awk -F'\t' '$1 == "gtest" {print $4}' "$bundle/GPU_TESTS" | sort -u)
unresolved=$(for b in "$bundle"/bin/* "$bundle"/ompi/bin/orte*; do
               ldd "$b" 2>&1 | grep -E 'not found|error|too short' | sed "s|^|$(basename "$b"): |"
             done | grep -v 'libcuda.so' | sort -u)
started() {  # started PROGRAM ARGS...: empty when it ran; else what the loader said
  local rc=0 left=$((facts_deadline - SECONDS))
  if ((left <= 0)); then
    echo "$(basename "$1"): not started: the facts' $facts_limit s were spent"
    return
  fi
  timeout "$left" "$@" >"$work/started.out" 2>"$work/started.err" || rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "$(basename "$1"): did not start within the facts' $facts_limit s"
  elif ((rc == 127)) || grep -q 'error while loading shared libraries' "$work/started.err"; then
    echo "$(basename "$1"): $(head -c 300 "$work/started.err")"
  fi
}
if [[ -z "$unresolved" ]]; then
  unresolved=$(for b in "$bundle"/bin/dtune-*; do started "$b" --version; done)
fi
listed=0
for t in $gtests; do
  [[ -z "$unresolved" ]] || break
  [[ -x "$bundle/bin/$t" ]] || wrong "GPU_TESTS names $t, which the bundle lacks" "rebuild the bundle (bash scripts/gpu-bundle.sh)"
  unresolved=$(started "$bundle/bin/$t" --gtest_list_tests)
  [[ -z "$unresolved" ]] || break
  # gtest lists "Suite." lines, then "  Name  # GetParam() = ..." lines: the full names.
  names=$(awk '/^[^ ]/ {s = $1} /^  [^ ]/ {print s $1}' "$work/started.out")
  while IFS=$'\t' read -r _ name _ _ args; do
    filter=$(grep -o -- '--gtest_filter=[^[:space:]]*' <<<"$args" | cut -d= -f2-)
    hit=0
    IFS=: read -ra pats <<<"${filter%%-*}"
    for n in $names; do
      for p in "${pats[@]:-*}"; do
        # shellcheck disable=SC2053  # the filter is a glob, as gtest reads it
        [[ $n == $p ]] && hit=1 && break 2
      done
    done
    ((hit)) || wrong "$t lists no test that ctest's entry $name selects (--gtest_filter=$filter)" \
      "rebuild the bundle from one build (its binaries and GPU_TESTS disagree)"
    listed=$((listed + 1))
  done < <(awk -F'\t' -v t="$t" '$1 == "gtest" && $4 == t' "$bundle/GPU_TESTS")
done
[[ -z "$unresolved" ]] || wrong "libraries do not resolve or programs do not start: $(tr '\n' ';' <<<"$unresolved")" \
  "rebuild the bundle (scripts/gpu-bundle.sh) on the dev machine; report which library was missing"
note "bundled programs: $(ls "$bundle/bin" | wc -l) resolve their libraries; $(wc -w <<<"$gtests") gpu test binaries list the $listed tests ctest runs"
if [[ $rehearsal == 0 ]]; then
  command -v nvidia-smi >/dev/null || wrong "no nvidia-smi" "a machine with the NVIDIA driver"
  gpus=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1) ||
    wrong "nvidia-smi fails: $gpus" "a working NVIDIA driver"
  [[ -n "$gpus" ]] || wrong "no GPU visible" "a GPU machine (CUDA_VISIBLE_DEVICES?)"
  note "GPUs: $(tr '\n' ';' <<<"$gpus")"
  [[ "$gpus" == *H200* ]] || note "note: not an H200; the anchors below are H200 figures"
fi
note "facts: ok ($((SECONDS - start)) s)"

# --- Steps -------------------------------------------------------------------------------------
results="$work/runs"
mkdir -p "$results"
row() { printf '%-32s %-8s %7s %5s  %s\n' "$@" >>"$work/steps"; }
row step status seconds limit note
failed=0
stand_in=""  # set before a step in a rehearsal: what the CPU stand-in runs instead
# step NAME LIMIT CMD...: runs CMD under the time left (at most LIMIT), logs its outcome.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - (SECONDS - start))) plan=$limit why=$stand_in
  stand_in=""
  if ((left < 15)); then
    row "$name" no-time 0 "$plan" "budget of $budget s spent"
    say "--- $name: not run, the budget is spent"
    return
  fi
  ((limit > left)) && limit=$left
  say "--- $name (at most $limit s${why:+; $why}): $*"
  local t0=$SECONDS rc=0
  : >"$work/step.out"
  timeout --kill-after=10 "$limit" "$@" > >(tee "$work/step.out") 2>&1 || rc=$?
  sleep 0.2  # tee's last lines
  headlines "$name"
  local status=ok tests
  tests=$(test_counts)
  case $rc in
    0|77)
      if [[ -n "$tests" && "$tests" == "0 passed"* ]]; then
        status=skipped why="${why:+$why; }$tests: each skipped itself"
      elif [[ -n "$tests" ]]; then
        why="${why:+$why; }$tests"
      elif grep -q 'nothing measured' "$work/step.out"; then
        status=skipped why="${why:+$why; }no GPU: it ran and measured nothing"
      elif ((rc == 77)); then
        status=skipped why="${why:+$why; }skipped itself (see its output)"
      fi ;;
    124|137) status=timeout why="over its $limit s"; failed=1 ;;
    *) status=failed why="exit $rc${tests:+; $tests}"; failed=1 ;;
  esac
  row "$name" "$status" "$((SECONDS - t0))" "$plan" "$why"
  say "--- $name: $status ${why:+($why)}"
}
skip() { row "$1" skipped 0 "$2" "$3"; say "--- $1: skipped ($3)"; }
# "P passed, S skipped[, F failed]" from a gtest or pytest run's output; empty for other programs.
test_counts() {
  local out="$work/step.out" p s f
  if grep -q '^\[==========\] .* ran\.' "$out"; then
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | head -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out" | head -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | head -1)
  elif grep -qE '^(=+ )?[0-9]+ (passed|skipped|failed|error)' "$out"; then
    local last
    last=$(grep -E '^(=+ )?[0-9]+ (passed|skipped|failed|error)' "$out" | tail -1)
    p=$(grep -oE '[0-9]+ passed' <<<"$last" | cut -d' ' -f1)
    s=$(grep -oE '[0-9]+ skipped' <<<"$last" | cut -d' ' -f1)
    f=$(grep -oE '[0-9]+ (failed|error)' <<<"$last" | cut -d' ' -f1)
  else
    return
  fi
  echo "${p:-0} passed, ${s:-0} skipped${f:+, $f failed}"
}
# The lines of a step's output that say what it measured, into summary.txt's headlines.
headlines() {
  {
    grep -E '^# (dtune-train:|throughput|MFU|peak memory|data:|local SGD|stopped|Out of bounds|Avg bus bandwidth|peak |launch on|[0-9]+ packages?, |dtune-probe [a-z]+: no GPU)|^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]|^(=+ )?[0-9]+ (passed|skipped|failed)' "$work/step.out"
    awk '/^# STREAM on/ {h = $0} h && $1 == "triad" {print h " |" $0}
         /^# copy / {if (r) print c " |" r; c = $0; r = ""} c && /^ +[0-9]/ {r = $0}
         END {if (r) print c " |" r}' "$work/step.out"
    awk '/^#/ {next} $1 == 8 && $3 ~ /float/ {print "8 B row:" $0; exit}' "$work/step.out"
  } | sed "s|^|$1: |" >>"$work/headlines"
}
train() {  # train NAME LIMIT ARGS...: dtune-train with its HDF5 in the work folder
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" dtune-train --output "$results/$name.h5" --timeout 120 "$@"
}
gpu() { [[ $rehearsal == 0 ]]; }
rehearsal_note="rehearsal: no GPU"
# The CUDA runs and their CPU stand-ins (tiny sizes; bf16 autocast on the CPU too).
r50=(--model resnet50 --image-size 224 --channels-last --device cuda --backend nccl --precision bf16)
r18=(--model resnet18 --width 8 --image-size 32 --num-classes 10 --channels-last --device cpu
     --precision bf16 --threads 1)

facts_s=$((SECONDS - start))  # the facts' own time, before any step's limit counts
# 1. Probes: what the hardware does, before anything of ours is trusted.
if gpu; then
  step probe.gemm 30 dtune-probe gemm --device cuda --dtype bf16,fp16,tf32 --library torch,cublaslt \
    --shapes 4096,8192 --min-time 0.2 --min-iters 5 -w 3 --output "$results/probe-gemm.h5"
  step probe.memory 20 dtune-probe memory -n 10 --output "$results/probe-memory.h5"
else
  stand_in="CPU stand-in: torch::mm bf16, fp16 at 64^3"
  step probe.gemm 30 dtune-probe gemm --device cpu --dtype bf16,fp16 --library torch --shapes 64 \
    --min-time 0.01 --min-iters 2 -w 1 --output "$results/probe-gemm.h5"
  stand_in="CPU stand-in: host STREAM, 8 MiB arrays"
  step probe.memory 20 dtune-probe memory --array-size 8M -n 3 --output "$results/probe-memory.h5"
fi
# (Without a GPU these two say so and measure nothing: the rehearsal still checks their flags.)
step probe.copy 15 dtune-probe copy -b 4K -e 1G -f 4 -n 10 --output "$results/probe-copy.h5"
step probe.launch 10 dtune-probe launch -n 10000 --output "$results/probe-launch.h5"
step probe.topology 10 dtune-probe topology --output "$results/probe-topology.h5"

# 2. Tests: each gpu test binary once, with the filters of all its ctest entries joined (one
# process per binary and rank count instead of one per test); then the Python tests, one pytest.
declare -A filters=()
groups=()
while IFS=$'\t' read -r kind _ np prog args; do
  [[ $kind == gtest ]] || continue
  key="$prog $np"
  [[ -n "${filters[$key]+set}" ]] || groups+=("$key")
  f=$(grep -o -- '--gtest_filter=[^[:space:]]*' <<<"$args" | cut -d= -f2-)
  filters[$key]+="${filters[$key]:+:}${f:-*}"
done <"$bundle/GPU_TESTS"
per_binary=$((60 / (${#groups[@]} > 0 ? ${#groups[@]} : 1)))
((per_binary < 10)) && per_binary=10
for key in "${groups[@]}"; do
  read -r prog np <<<"$key"
  # (--gtest_color=no: under mpirun's pseudo-terminal gtest would colour the lines counted here.)
  if ((np == 1)); then
    step "test.$prog" "$per_binary" "$prog" --gtest_color=no --gtest_filter="${filters[$key]}"
  else
    step "test.$prog.np$np" "$per_binary" mpirun -np "$np" --oversubscribe "$prog" --gtest_color=no \
      --gtest_filter="${filters[$key]}"
  fi
done
mapfile -t pyfiles < <(awk -F'\t' -v r="$repo" '$1 == "pytest" {print r "/" $4}' "$bundle/GPU_TESTS" | sort -u)
# (The rehearsal runs test_one_gpu_ranks.py's layouts on CPU ranks: its flags and comparisons run
# in CI. 90 s: the 60 s before and the 30 s of the one-rank local SGD step it replaces.)
one_gpu_device=cuda
gpu || one_gpu_device=cpu
step test.python 90 env DTUNE_ONE_GPU_DEVICE="$one_gpu_device" "$py" -m pytest -q -rs -p no:cacheprovider \
  --rootdir="$repo/tests" "${pyfiles[@]}" --junitxml="$out/gpu-tests.xml"

# 3. NCCL on one rank, 8 B to 1 GiB; nccl-tests beside it where it is installed.
if gpu; then
  step comm.nccl_1rank 30 dtune-comm --backend nccl -b 8 -e 1G -f 2 -n 20 -w 5 \
    --output "$results/comm-nccl.h5"
  if command -v all_reduce_perf >/dev/null; then
    step comm.nccl_tests_1rank 10 all_reduce_perf -b 8 -e 8 -g 1 -n 1000 -w 100
    cp "$work/step.out" "$work/nccl-tests.out"
  else
    skip comm.nccl_tests_1rank 10 "no all_reduce_perf (nccl-tests) on PATH"
  fi
else
  # The bundled mpirun, two ranks over shared memory: Open MPI's runtime is in the bundle.
  stand_in="CPU stand-in: MPI backend, 2 ranks, 8 B to 1 MiB"
  step comm.nccl_1rank 30 mpirun -np 2 --oversubscribe dtune-comm -b 8 -e 1M -f 4 -n 5 -w 1 \
    --output "$results/comm-nccl.h5"
  skip comm.nccl_tests_1rank 10 "$rehearsal_note"
fi

# 4. Training on one GPU through the NCCL reducer.
if gpu; then
  train train.resnet50.bf16 35 "${r50[@]}" --batch 256 --steps 30 --warmup-steps 5
  train train.gpt2-d12.bf16 35 --model gpt2-d12 --context 1024 --device cuda --backend nccl \
    --precision bf16 --batch 32 --steps 20 --warmup-steps 5
  # Llama 3.2 1B (issue 58) beside it: one bf16 step's MFU by torchtitan's count, context 2048,
  # full activation checkpointing (its 1.24 B parameters and AdamW state take ~20 GB).
  train train.llama3.2-1b.bf16 40 --model llama3.2-1b --context 2048 --device cuda --backend nccl \
    --precision bf16 --batch 8 --steps 6 --warmup-steps 2 --activation-checkpoint full
  # (No --local-sgd step here: on one rank local SGD turns itself off; two ranks run it on the one
  # GPU in test.python, test_one_gpu_ranks.py.)
else
  stand_in="CPU stand-in: resnet18 width 8 at 32x32, MPI"
  train train.resnet50.bf16 35 "${r18[@]}" --batch 8 --steps 2 --warmup-steps 1
  stand_in="CPU stand-in: gpt2-tiny, MPI"
  train train.gpt2-d12.bf16 35 --model gpt2-tiny --device cpu --precision bf16 --threads 1 --batch 4 \
    --steps 2 --warmup-steps 1
  stand_in="CPU stand-in: llama3-tiny, MPI"
  train train.llama3.2-1b.bf16 40 --model llama3-tiny --device cpu --precision bf16 --threads 1 \
    --batch 4 --steps 2 --warmup-steps 1 --activation-checkpoint full
fi

# 5. One profiled window (Kineto with CUDA activities on a GPU).
if gpu; then
  train profile.resnet50 20 "${r50[@]}" --batch 128 --steps 6 --warmup-steps 2 \
    --profile-steps 3:2 --profile-dir "$work/profile"
else
  stand_in="CPU stand-in: resnet18 width 8"
  train profile.resnet50 20 "${r18[@]}" --batch 8 --steps 2 --warmup-steps 1 --profile-steps 1:1 \
    --profile-dir "$work/profile"
fi

# 6. The loader: JPEG shards made here, read by 8 and 14 workers (train.resnet50.bf16 is the same
# run on synthetic data).
if gpu; then
  step loader.make_shards 15 dtune-data make images --out "$work/images" --samples 2048 --width 256 \
    --height 256 --shard-samples 256 --classes 100
  for w in 8 14; do
    train "loader.jpeg.w$w" 15 "${r50[@]}" --num-classes 100 --batch 256 --steps 12 --warmup-steps 3 \
      --data "$work/images" --workers "$w"
  done
  # The same shards decoded by nvJPEG on the GPU (the bundle carries libnvjpeg.so.13).
  train loader.nvjpeg 10 "${r50[@]}" --num-classes 100 --batch 256 --steps 12 --warmup-steps 3 \
    --data "$work/images" --workers 8 --decode nvjpeg
else
  stand_in="CPU stand-in: 64 images of 40x40"
  step loader.make_shards 15 dtune-data make images --out "$work/images" --samples 64 --width 40 \
    --height 40 --shard-samples 32 --classes 10
  for w in 8 14; do
    stand_in="CPU stand-in: resnet18 width 8"
    train "loader.jpeg.w$w" 15 "${r18[@]}" --batch 8 --steps 2 --warmup-steps 1 --data "$work/images" \
      --workers "$w"
  done
  skip loader.nvjpeg 10 "$rehearsal_note"
fi

# Issue 30's anchor figures for one H200 SXM beside what this run measured, read from the steps'
# HDF5 files (a CPU stand-in's figures never count: device and backend must be CUDA and NCCL).
anchors() {
  "$py" - "$results" "$work/nccl-tests.out" <<'PY'
import math, pathlib, sys

import h5py

runs, nccl_tests = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def first(file, pick, **want):
    """pick(group) of the first run in runs/FILE whose attributes equal WANT; None if none."""
    try:
        with h5py.File(runs / file, "r") as f:
            for g in f["runs"].values():
                if all(text(g.attrs.get(k, "")) == v for k, v in want.items()):
                    return pick(g)
    except (OSError, KeyError):
        pass
    return None


def gemm(g):  # (1 rank, S shapes) median TFLOP/s at 8192^3
    at = [i for i, s in enumerate(zip(g["m"][()], g["n"][()], g["k"][()])) if s == (8192,) * 3]
    return float(g["tflops"][0, at[0]]) if at else None


def latency_8b(g):  # out-of-place time at 8 B
    at = [i for i, s in enumerate(g["size_bytes"][()]) if s == 8]
    return float(g["time_us_reported"][0, at[0]]) if at else None


def nccl_tests_8b():  # all_reduce_perf's out-of-place time (column 6) on its 8 B row
    try:
        rows = [r.split() for r in nccl_tests.read_text().splitlines() if not r.startswith("#")]
    except OSError:
        return None
    return next((float(r[5]) for r in rows if len(r) > 5 and r[0] == "8"), None)


lt = first("probe-gemm.h5", gemm, probe="gemm", device="cuda", dtype="bfloat16", library="cublaslt")
mm = first("probe-gemm.h5", gemm, probe="gemm", device="cuda", dtype="bfloat16", library="torch::mm")
triad = first("probe-memory.h5", lambda g: g.attrs["triad_gbps"] / 1e3, probe="memory", device="cuda")
h2d = first("probe-copy.h5", lambda g: float(g["gbps"][0].max()), probe="copy", direction="h2d", memory="pinned")
ours = first("comm-nccl.h5", latency_8b, benchmark="comm", backend="nccl", collective="allreduce")
theirs = nccl_tests_8b()
r50 = first("train.resnet50.bf16.h5", lambda g: g.attrs["samples_per_s"], benchmark="train", device="cuda")
mfu = first("train.gpt2-d12.bf16.h5", lambda g: 100 * g.attrs["mfu"], benchmark="train", device="cuda")
llama_mfu = first("train.llama3.2-1b.bf16.h5", lambda g: 100 * g.attrs["mfu"], benchmark="train", device="cuda")


def verdict(value, anchor, higher=True):
    if value is None or anchor is None or math.isnan(value):
        return "-" if anchor is not None else "n/a"
    return "meets" if (value >= anchor if higher else value <= anchor) else "misses"


def fmt(value, unit, digits=1):
    if value is None:
        return "not measured"
    return "n/a (NaN: no peak known)" if math.isnan(value) else f"{value:.{digits}f} {unit}"


gemm_text = fmt(lt, "TFLOP/s (cuBLASLt)")
if mm is not None:
    gemm_text += f", {mm:.1f} (torch::mm)"
if ours is None:
    nccl_text, nccl_verdict = "not measured", "-"
elif theirs is None:
    nccl_text, nccl_verdict = f"{ours:.2f} us; nccl-tests n/a (not on this machine)", "n/a"
else:
    nccl_text = f"{ours:.2f} us; nccl-tests {theirs:.2f} us"
    nccl_verdict = verdict(ours, theirs + 1.0, higher=False)
rows = [
    ("cuBLAS bf16 GEMM 8192^3", ">= 700 TFLOP/s", gemm_text, verdict(lt, 700)),
    ("HBM3e STREAM triad", ">= 4.0 TB/s", fmt(triad, "TB/s", 2), verdict(triad, 4.0)),
    ("pinned H2D", ">= 50 GB/s", fmt(h2d, "GB/s"), verdict(h2d, 50)),
    ("NCCL 1-rank allreduce 8 B", "nccl-tests + 1 us", nccl_text, nccl_verdict),
    ("ResNet-50 bf16 channels-last", ">= 3000 img/s", fmt(r50, "img/s", 0), verdict(r50, 3000)),
    ("GPT-2 124M bf16 MFU", ">= 45 %", fmt(mfu, "%"), verdict(mfu, 45)),
    ("Llama 3.2 1B bf16 MFU", "beside GPT-2's", fmt(llama_mfu, "%"), "-"),
]
print("## anchors (issue 30: one H200 SXM) beside what this run measured")
print(f"{'figure':<30} {'anchor':<18} {'measured':<48} verdict")
for r in rows:
    print(f"{r[0]:<30} {r[1]:<18} {r[2]:<48} {r[3]}")
PY
}

# --- What comes back ---------------------------------------------------------------------------
# Every run of this check in one file, laid out as `dtune sweep merge` writes it.
PYTHONPATH="$repo/sweeps" "$py" -m dtune_sweep.point_copy "$out/results.h5" "$results"/*.h5 || failed=1
if [[ -d "$work/profile" ]]; then
  for t in "$work"/profile/rank0*.json; do
    [[ -f "$t" ]] && gzip -c "$t" >"$out/$(basename "$t").gz"
  done
fi
planned=$(awk 'NR > 1 {s += $4} END {print s}' "$work/steps")
{
  echo
  echo "## steps ($((SECONDS - start)) s of a $budget s budget; the step limits sum to $planned s)"
  cat "$work/steps"
  echo
  echo "## budget"
  # Were every step to run to its limit after these facts, the first the budget would not reach.
  awk -v facts="$facts_s" -v budget="$budget" 'NR > 1 {
      t += $4; if (!cut && facts + t > budget) cut = $1 }
    END { if (cut) print "at their limits after " facts " s of facts, the budget drops " cut " and every step after it"
          else print "at their limits after " facts " s of facts: " facts + t " s, every step within the " budget " s budget" }' "$work/steps"
  echo
  echo "## headline lines"
  cat "$work/headlines" 2>/dev/null
  echo
  anchors
} >>"$summary"
cat "$work/steps"
for f in "$out"/*; do
  sz=$(stat -c %s "$f")
  ((sz > 16 * 1024 * 1024)) && say "warning: $(basename "$f") is $((sz >> 20)) MiB, above what comes back (16 MiB)"
done
say "output in $out: $(cd "$out" && ls | tr '\n' ' ')"
say "turn it into a report on the dev machine: scripts/dtune report $out/results.h5 -o $out/report"
exit $failed
