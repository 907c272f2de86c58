#!/usr/bin/env bash
# Hand-planted bugs in the C++ formulas users read (busbw factors, the alpha-beta fit, MFU, the
# pipeline bubble): each plant is applied to the source, its test binary rebuilt and the test that
# must catch it run; the plant is then undone. Prints one line per plant (CAUGHT or MISSED) and exits
# 1 when any is missed. Not part of the test command (each plant rebuilds a test binary: minutes).
# The Python side has scripts/mutation.sh. Usage: scripts/cpp-plants.sh [BUILD_DIR]
# A plant whose check is a pytest node (tests/...py::name) rebuilds the named binary (dtune-train,
# dtune_image_tool) and runs that test against it, as ctest would. DTUNE_PLANTS=TEXT runs only the
# plants whose line contains TEXT (e.g. DTUNE_PLANTS=models/llama.cc).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
# file | text | planted text (\\n: a line break) | test binary | gtest filter
plants=(
  "benchmarks/comm/collectives.cc|return 2.0 * (n - 1) / n;|return (n - 1) / n;|dtune_unit_tests|Bandwidth.BusbwFactorsMatchNcclTests"
  "benchmarks/comm/collectives.cc|double ring_factor(double n) { return (n - 1) / n; }|double ring_factor(double n) { return 1.0; }|dtune_unit_tests|Bandwidth.BusbwFactorsMatchNcclTests"
  "core/stats.cc|const double w = 1.0 / (y * y);\\n    sw += w;|const double w = 1.0;\\n    sw += w;|dtune_unit_tests|AlphaBetaFit.*"
  "train/mfu.cc|(peak.tflops * 1e12 * devices)|(peak.tflops * 1e12)|dtune_train_tests|GpuPeaks.*:*Mfu*"
  "train/pipeline/schedule.cc|return (P - 1) / (v * M + P - 1);|return (P - 1) / (v * M);|dtune_train_tests|PipelineSchedule.*"
  # ZeRO-3 (issue 61): gathered bytes at 4 bytes an element; the forward and backward prefetch
  # windows one unit off.
  "train/zero3.cc|(world_ - 1) * unit.part * static_cast<int64_t>(unit.flat.element_size())|(world_ - 1) * unit.part * 4|dtune-train|tests/mpi/test_shard_mpi.py::test_zero3_counts_every_byte_in_the_weights_element_size"
  "train/zero3.cc|u <= *mine.rbegin() + n; ++u|u <= *mine.rbegin() + n + 1; ++u|dtune_train_tests|Zero3Order.*"
  "train/zero3.cc|u-- > 0 && u + n >= lo;|u-- > 0 && u + n > lo;|dtune_train_tests|Zero3Order.*"
  # The region decoder: the fast-decode box's right edge rounded down; chroma's pixels per block
  # inverted (4:2:0's 16 read as 4).
  "data/image/jpeg_crop.cc|const int sr = (box.left + box.width + d - 1) / d|const int sr = (box.left + box.width) / d|dtune_image_tool|tests/data/test_image_reference.py::test_fast_region_decode_equals_pillow_draft_mode"
  "data/image/jpeg_crop.cc|* max_h / comp.h_samp_factor;|* comp.h_samp_factor / max_h;|dtune_image_tool|tests/data/test_image_reference.py::test_region_coefficient_bytes_are_the_blocks_around_the_box"
  # The device mesh (issue 56): a wrong degree, a wrong inverse of the coordinates, a communicator
  # of the wrong peers (every axis's colour this rank's own), the data source's data-parallel index lost.
  "train/mesh.cc|= world / (tp * pp);|= world / tp;|dtune_train_tests|MeshShape.*"
  "train/mesh.cc|for (auto it = order.rbegin(); it != order.rend(); ++it)|for (auto it = order.begin(); it != order.end(); ++it)|dtune_train_tests|MeshShape.*"
  "train/mesh.cc|    base[static_cast<size_t>(a)] = 0;\\n||dtune-train|tests/mpi/test_mesh_mpi.py::test_pipeline_with_sharded_data_axis_equals_accumulation"
  "train/setup.cc|s.batch, o.accum_steps, dp_rank, o.seed|s.batch, o.accum_steps, 0, o.seed|dtune-train|tests/mpi/test_mesh_mpi.py::test_pipeline_with_sharded_data_axis_equals_accumulation"
  # The Llama family (issue 58): the rotary halves swapped, the KV heads repeated in the wrong
  # order (tiled, where transformers' repeat_kv and SDPA's GQA give query head h the KV head
  # h / (H / K)), the norm's epsilon dropped, a layer's two norms counted once.
  "models/llama.cc|return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);|return torch::cat({x.narrow(-1, h, h), -x.narrow(-1, 0, h)}, -1);|dtune-models|tests/models/test_llama.py::test_logits_loss_and_gradients_equal_transformers"
  "models/llama.cc|    const bool gqa = kv_heads_ != heads_;|    const bool gqa = false;\n    k = k.repeat({1, heads_ / kv_heads_, 1, 1});\n    v = v.repeat({1, heads_ / kv_heads_, 1, 1});|dtune-models|tests/models/test_llama.py::test_logits_loss_and_gradients_equal_transformers"
  "models/llama.cc|h.pow(2).mean(-1, /*keepdim=*/true) + eps_)|h.pow(2).mean(-1, /*keepdim=*/true))|dtune-models|tests/models/test_llama.py::test_logits_loss_and_gradients_equal_transformers"
  "models/model_size.cc|  layer.insert(layer.end(), {C, C});|  layer.insert(layer.end(), {C});|dtune-models|tests/models/test_llama.py::test_parameter_counts_equal_transformers_and_the_published_ones"
  # Tensor parallelism (issue 57): the f function's backward all-reduce dropped (each rank's
  # column-parallel layers send back only their part of the input's gradient); the embedding's and
  # the cross-entropy's vocabulary shard offsets wrong.
  "models/tensor_parallel.cc|    as_group(ctx)->all_reduce_sum(g);\n||dtune-train|tests/mpi/test_llama_mpi.py::test_llama_layouts_equal_accumulation[tp2]"
  "models/llama.cc|tp_rank_ * embed_tokens_->weight.size(0)|0 * embed_tokens_->weight.size(0)|dtune-train|tests/mpi/test_llama_mpi.py::test_llama_layouts_equal_accumulation[tp2]"
  "models/llama.cc|tp_rank_ * logits.size(-1)|0 * logits.size(-1)|dtune-train|tests/mpi/test_llama_mpi.py::test_llama_layouts_equal_accumulation[tp2]"
  # GPT-2's fused c_attn sliced as one block of rows, not this rank's heads of each of q, k and v.
  "models/gpt.cc|w.narrow(0, s * whole_part + tp_rank_ * part, part)|w.narrow(0, (3 * tp_rank_ + s) * part, part)|dtune-train|tests/mpi/test_gpt_tp_mpi.py::test_gpt_tensor_parallel_layouts_equal_accumulation[tp2]"
  # Sequence parallelism: the norms' gradients left partial; the rotary table for a rank's share
  # of the positions.
  "models/llama.cc|norm.weight\")) sum_gradient_over_tp(p.value(), g);|norm.weight\")) (void)g;|dtune-train|tests/mpi/test_llama_mpi.py::test_llama_layouts_equal_accumulation[tp2-sp]"
  "models/llama.cc|x.size(1) * (sp_ ? tp_size_ : 1)|x.size(1)|dtune-train|tests/mpi/test_llama_mpi.py::test_llama_layouts_equal_accumulation[tp2-sp]"
  # Zero bubble (issue 63): a W pass run before its B; the linear layers' bias gradients dropped;
  # the W passes' deferred work never done; the head joined to the last block when the ends are
  # apart.
  "train/pipeline/schedule.cc|    out.push_back({ActionKind::kBackwardInput, b, 0});\n    if (b++ >= delay) out.push_back({ActionKind::kBackwardWeight, w++, 0});|    if (b >= delay) out.push_back({ActionKind::kBackwardWeight, w++, 0});\n    out.push_back({ActionKind::kBackwardInput, b++, 0});|dtune_train_tests|PipelineSchedule.*"
  "models/weight_grad_store.cc|    if (k.bias.defined()) add(k.bias, gy.sum(0));\n||dtune-train|tests/mpi/test_pipeline_mpi.py::test_pipeline_equals_accumulation_in_one_process[tiny-2-zbh1]"
  "train/pipeline/pipeline_step.cc|  weight_grads_.compute(store_key(a));\n||dtune-train|tests/mpi/test_pipeline_mpi.py::test_pipeline_equals_accumulation_in_one_process[tiny-2-zbh1]"
  "train/pipeline/partition.cc|units.push_back({last_begin, last});|units.back().second += last;|dtune_train_tests|PipelinePartition.*"
  # ZB-V: the V's second chunk placed round-robin; the gradient handed between a stage's own two
  # chunks lost.
  "train/pipeline/schedule.cc|  if (schedule == Schedule::kZbV) return v < P ? v : 2 * P - 1 - v;|  if (schedule == Schedule::kZbV) return v % P;|dtune_train_tests|PipelineSchedule.*"
  "train/pipeline/pipeline_step.cc|    handed_[tag(v - 1, a.micro, true)] = f.input.grad();|    handed_[tag(v - 1, a.micro, true)] = torch::zeros_like(f.input.grad());|dtune-train|tests/mpi/test_pipeline_mpi.py::test_pipeline_equals_accumulation_in_one_process[d6-2-zbv]"
  # ... and the targets stage 0 hands itself under --data taken in the wrong order.
  "train/pipeline/pipeline_step.cc|handed_[kTargetTag + a.micro] = b.target.clone().to(s_.device);|handed_[kTargetTag + a.micro] = b.target.flip(1).clone().to(s_.device);|dtune-train|tests/mpi/test_pipeline_mixed_mpi.py::test_data_pipeline_equals_accumulation_in_one_process[zb-v]"
  # --batch auto with --tp (issue 57): the probe's buckets for every multi-rank run (tp ranks alone
  # reduce nothing); the probe's model unsplit (a group of 1).
  "train/data_parallel_step.cc|if (probe && run_dp > 1 &&|if (probe && ctx.world_size() > 1 &&|dtune-train|tests/mpi/test_llama_mpi.py::test_batch_auto_with_tensor_parallelism_lands_on_the_memory_boundary[tp2-sp]"
  "train/setup.cc|make_probe_tp_group(o.tp)|make_probe_tp_group(1)|dtune-train|tests/mpi/test_llama_mpi.py::test_batch_auto_with_tensor_parallelism_lands_on_the_memory_boundary[tp2-sp]"
  # The run's tp bytes: rank 0's stage alone again (a pipeline's other stages left out).
  "benchmarks/train/train_results.cc|      ranks.tp_pipeline_bytes += ranks.tp_comm_bytes[r];|      ranks.tp_pipeline_bytes += r == 0 ? ranks.tp_comm_bytes[r] : 0;|dtune-train|tests/mpi/test_llama_mpi.py::test_llama_layouts_equal_accumulation[tp2-sp-pp2]"
)
missed=0
restore() { [[ -n "${saved:-}" ]] && cp "$saved" "$repo/$file" && rm -f "$saved"; saved=; }
trap restore EXIT
for p in "${plants[@]}"; do
  [[ -n "${DTUNE_PLANTS:-}" && "$p" != *"$DTUNE_PLANTS"* ]] && continue
  IFS='|' read -r file from to binary filter <<<"$p"
  saved=$(mktemp)
  cp "$repo/$file" "$saved"
  FROM=$from TO=$to python3 - "$repo/$file" <<'PY'
import os, sys
path, old, new = sys.argv[1], os.environ["FROM"].replace("\\n", "\n"), os.environ["TO"].replace("\\n", "\n")
text = open(path).read()
assert text.count(old) == 1, f"{path}: the plant's text is not there exactly once"
open(path, "w").write(text.replace(old, new))
PY
  ninja -C "$build" "$binary" >/dev/null
  if [[ "$filter" == tests/* ]]; then
    check=(env DTUNE_BIN_DIR="$build/bin" PYTHONPATH="$repo/report:$repo/tests:$repo/tests/models"
      "$repo/.venv/bin/python" -m pytest -q -x -p no:cacheprovider --rootdir="$repo/tests" "$repo/$filter")
  else
    check=("$build/bin/$binary" --gtest_filter="$filter")
  fi
  if "${check[@]}" >/dev/null 2>&1; then
    echo "MISSED  $file: '$from' -> '$to' passed ${check[*]: -1}"
    missed=1
  else
    echo "CAUGHT  $file: '$from' -> '$to' by $binary ${check[*]: -1}"
  fi
  restore
done
# The binaries without plants again.
ninja -C "$build" dtune_unit_tests dtune_train_tests dtune-train dtune_image_tool >/dev/null
exit "$missed"
