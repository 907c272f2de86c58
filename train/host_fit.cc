// Host memory lower bounds of a training run.
#include "train/host_fit.h"

#include <cmath>

#include "core/error.h"
#include "core/host_memory.h"
#include "models/family.h"
#include "models/gpt.h"
#include "models/llama_config.h"
#include "models/model_size.h"

namespace dtune::train {

HostNeed host_need(const Options& o) {
  HostNeed n;
  const bool cpu = o.device == DeviceKind::kCpu;
  const double weight_copies =
      cpu ? 2 : 1;  // CPU: the gradients too; GPU: built on the host, then moved
  if (models::model_family(o.model).name == "gpt2") {
    const models::GptConfig c = models::gpt_config(o.model, o.model_options);
    const double C = static_cast<double>(c.width), T = static_cast<double>(c.context);
    const double V = static_cast<double>(c.vocab), L = static_cast<double>(c.layers);
    // wte (V, C), wpe (T, C), per block 12C² weights + 13C biases and norms, the final norm 2C.
    n.table_bytes = T * C * 4 * weight_copies;
    n.model_bytes = (V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C) * 4 * weight_copies;
    // The synthetic sequence (T + 1 tokens) and its input and target slices, int64; on CPU the
    // logits (T, V) and the embedding sum (T, C) in fp32.
    n.per_sample_bytes = (T + 1 + 2 * T) * 8 + (cpu ? (T * V + T * C) * 4 : 0);
  } else if (models::model_family(o.model).name == "llama") {
    const models::LlamaConfig c = models::llama_config(o.model, o.model_options);
    const double C = static_cast<double>(c.width), T = static_cast<double>(c.context);
    const double V = static_cast<double>(c.vocab), D = static_cast<double>(c.head_dim);
    // Every parameter (model_size.h counts them as llama.cc builds them); the rotary tables, cos
    // and sin (T, D) in fp32, are the only part that grows with the context.
    n.table_bytes = 2 * T * D * 4;
    n.model_bytes = static_cast<double>(models::model_size(o.model, o.model_options).parameters) *
                    4 * weight_copies;
    // As the GPT's: the sequence and its slices, on CPU the logits and the embedding output.
    n.per_sample_bytes = (T + 1 + 2 * T) * 8 + (cpu ? (T * V + T * C) * 4 : 0);
  } else {
    // (3, S, S) fp32 input; on CPU the first convolution's output (width, S/2, S/2).
    const double S = static_cast<double>(o.model_options.image_size);
    const double W = static_cast<double>(o.model_options.width);
    n.per_sample_bytes = 3 * S * S * 4 + (cpu ? W * std::ceil(S / 2) * std::ceil(S / 2) * 4 : 0);
  }
  return n;
}

void refuse_impossible_sizes(const Options& o, const RunContext& ctx) {
  const HostNeed need = host_need(o);
  auto bytes = [](double b) { return b >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(b); };
  // The one check (core/host_memory.h), collective: the node with the least per rank decides.
  const auto& mo = o.model_options;
  const std::string flag = mo.context > 0 && need.table_bytes * 2 >= need.model_bytes
                               ? "--context " + std::to_string(mo.context)
                           : mo.vocab > 0 ? "--vocab " + std::to_string(mo.vocab)
                                          : "--model " + o.model;
  refuse_unless_host_fits(bytes(need.model_bytes), ctx, flag + " (the model's parameters alone)",
                          "lower " + flag.substr(0, flag.find(' ')));
  if (o.batch_auto) return;  // the batch finder stops where memory ends
  const double total = need.model_bytes + need.per_sample_bytes * static_cast<double>(o.batch);
  const std::string with = mo.context > 0 ? " with --context " + std::to_string(mo.context)
                           : !models::model_family(o.model).sequence
                               ? " with --image-size " + std::to_string(mo.image_size)
                               : "";
  refuse_unless_host_fits(bytes(total), ctx,
                          "--batch " + std::to_string(o.batch) + with +
                              " (parameters and the batch's input" +
                              (o.device == DeviceKind::kCpu ? " and outputs" : "") + " alone)",
                          "lower --batch");
}

}  // namespace dtune::train
