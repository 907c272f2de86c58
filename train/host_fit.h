// Refusing sizes that obviously cannot fit in host memory, before anything is allocated: a lower
// bound of what one rank must hold on the host at once (parameters and their gradients, one
// batch's input and, on CPU, its logits), compared with MemAvailable shared by the ranks of the
// node (core/host_memory.h). One line naming the flag, the bytes needed and available, instead of
// minutes of swapping, std::bad_alloc or the kernel's OOM killer. Sizes that pass may still not
// fit (activations are not counted); those end as an "oom" record (outcome.h, OutOfMemory).
#pragma once

#include "core/context.h"
#include "train/config.h"

namespace dtune::train {

// Lower bounds in bytes per rank.
struct HostNeed {
  double model_bytes = 0;       // parameters (and gradients on CPU)
  double table_bytes = 0;       // of which a GPT's positional table (grows with --context)
  double per_sample_bytes = 0;  // one sample's input (and logits on CPU)
};
HostNeed host_need(const Options& o);

// Collective (every rank takes the smallest per-rank share of its node's MemAvailable, so all
// agree). Throws UsageError naming --batch, --context, --vocab or --model.
void refuse_impossible_sizes(const Options& o, const RunContext& ctx);

}  // namespace dtune::train
