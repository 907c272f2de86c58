#!/usr/bin/env bash
# The scaling model (`dtune model`) against measurement on this machine: the tiny GPT and the tiny
# ResNet on 1, 2 and 4 ranks (one node, CPU, 1 thread per rank), two bucket sizes, and dtune-comm
# allreduce on 2 and 4 ranks for the intra-node α–β fits; then `dtune model check` over all of it.
# Target: median absolute error of the predicted step time <= 15% over the multi-rank runs.
# Each 1-rank profile is measured right before its model's multi-rank runs, so drift of the
# machine hits them alike. 4 ranks on 2 cores share them (ranks and communication threads).
# The model knows this machine: compute stretched by max(1, R·T/C) (2 ranks x 1 thread on 2
# cores: 1; 4 ranks: 2), and a reduction that starts during backward costed from dtune-comm
# beside one busy thread per rank, each call starting cold (--load-threads 1 --gap-us 5000; the
# trainer's communication thread wakes for each bucket while the compute thread holds the core,
# which dtune-comm's back-to-back calls never see: their small calls fit in one time slice).
# Measured 2026-12-01 on the project's 2-CPU machine, shared with other sessions (load average
# ~9-10): median |error| 21.2% over the 8 runs (was 74.6% at load 4 and 49.6% at load 10 with
# compute scaling and busy links but back-to-back calls); --gap-us 2000 and 10000 gave 21.8% and
# 24.9% on the same training runs. The noise floor at that load: two 1-rank profiles of the same
# model minutes apart differ by 26-28% in median step. A second run at load 4.7-6.1 gave 47.6%:
# its 1-rank profiles were slow against its multi-rank runs (4 tiny-GPT ranks on 2 cores took a
# median 69 ms per step against the profile's 52 ms for one: faster per rank than physically
# possible unless the profile ran slowed), and beside-load links cheaper (alpha 1.4 ms against
# 31 ms at 2 ranks), while the trainer's exposed time stayed 14-53 ms at 2 ranks. Not met: the
# machine's drift between runs is larger than the target. Earlier diagnosis (model_overlap_replay.py):
# the overlap replay fed a run's own reduction durations reproduces its exposed time to 1-4%.
#
# Usage: benchmarks/train/model_check.sh [-o DIR] [-s STEPS]
#   -o  where the results go (default results/model-check; an existing file is replaced)
#   -s  measured steps per run (default 30; 3 warm-up steps before them)
# Env: DTUNE_BIN_DIR (default build/bin). Exit 0 whether or not the target is met (a benchmark).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin_dir=${DTUNE_BIN_DIR:-$repo/build/bin}
out=results/model-check steps=30
while getopts "o:s:h" opt; do
  case $opt in
    o) out=$OPTARG ;;
    s) steps=$OPTARG ;;
    *) sed -n '25,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
common=(--threads 1 --steps "$steps" --warmup-steps 3 --overwrite)
gpt=(--model gpt2-tiny --context 64 --batch 4)
resnet=(--model resnet18 --width 16 --image-size 32 --num-classes 10 --batch 8)

# The intra-node links on idle cores, and beside one busy thread per rank (--load-threads 1: the
# training runs' one compute thread per rank beside their communication thread), each call then
# starting cold after 5 ms asleep (--gap-us: training's reductions are sparse, not back to back).
for np in 2 4; do
  "${mpirun[@]}" -np $np "$bin_dir/dtune-comm" -b 1K -e 16M -f 4 -n 20 -w 5 --collective allreduce \
    --output "$out/comm-np$np.h5" --overwrite > "$out/comm-np$np.log"
  "${mpirun[@]}" -np $np "$bin_dir/dtune-comm" -b 1K -e 16M -f 4 -n 20 -w 5 --collective allreduce \
    --load-threads 1 --gap-us 5000 --output "$out/comm-np$np-load1.h5" --overwrite > "$out/comm-np$np-load1.log"
done
for name in gpt resnet; do
  declare -n model=$name
  "$bin_dir/dtune-train" "${model[@]}" "${common[@]}" --output "$out/$name-np1.h5" > "$out/$name-np1.log"
  for np in 2 4; do
    for bucket in 0.25 25; do
      first=$(awk -v b=$bucket 'BEGIN { print (b < 1 ? b : 1) }')
      "${mpirun[@]}" -np $np "$bin_dir/dtune-train" "${model[@]}" "${common[@]}" --bucket-mb $bucket \
        --first-bucket-mb "$first" --output "$out/$name-np$np-b$bucket.h5" > "$out/$name-np$np-b$bucket.log"
    done
  done
done
"$repo/scripts/dtune" model check "$out"
