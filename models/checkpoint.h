// Activation checkpointing (PyTorch's reentrant torch.utils.checkpoint, in C++): a region runs its
// forward without keeping its activations, and its backward runs the forward again, with gradients
// on and under the autocast state the forward had, then back-propagates through the recomputed
// graph. Parameter gradients accumulate as in an ordinary backward (their hooks fire), so what a
// step computes is unchanged, bit for bit on the same kernels; the memory the region's activations
// held between forward and backward is spent again as compute. The regions have no dropout, so no
// random state needs replaying.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <functional>

namespace dtune::models {

using Region = std::function<torch::Tensor(const torch::Tensor&)>;

// fn(x), keeping only x for the backward, which adds the seconds it spends recomputing to
// `recompute_seconds` (host clock: the work itself on CPU; on a GPU only its launches). When x
// needs no gradient there is no backward to recompute for (and the region's parameters would get
// none): fn runs as it is. `fn` and the counter must outlive the backward.
torch::Tensor checkpointed(const Region& fn, const torch::Tensor& x,
                           std::atomic<double>* recompute_seconds);

}  // namespace dtune::models
