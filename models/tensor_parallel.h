// Megatron-LM's tensor parallelism, the pieces a model composes (REFERENCE.md, "Tensor parallelism
// and layouts"): a tensor-parallel group's collectives behind an interface (the trainer gives the
// mesh's tp axis; MPI here), the two conjugate identity/all-reduce functions around column- and
// row-parallel layers (f and g in the Megatron paper), and the vocabulary-parallel embedding and
// cross-entropy, so the full logits are never gathered. Every rank of a group holds the same
// activations between its layers; parameters are split as the model says (models/llama.cc).
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/weights.h"

namespace dtune::models {

// One tensor-parallel group's collectives. Blocking; every rank calls them in the same order.
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place over the group (a contiguous tensor).
  virtual void all_reduce_sum(torch::Tensor& t) = 0;
  virtual void all_reduce_max(torch::Tensor& t) = 0;
  // The group's tensors concatenated along `dim`, in rank order (each rank's of one shape).
  virtual torch::Tensor all_gather(const torch::Tensor& t, int64_t dim) = 0;
  // The group's sum, cut along `dim` into size() equal parts: this rank's part.
  virtual torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim) = 0;
  // What the group's collectives moved and cost since the last call, then reset: the bytes of
  // each collective's whole tensor as nccl-tests sizes it (an all-reduce's or a reduce-scatter's
  // input, an all-gather's output) and the seconds spent in them, in all and by site.
  struct Traffic {
    int64_t bytes = 0;
    double seconds = 0;
    std::vector<int64_t> site_bytes;  // [site]: as far as the highest site that communicated
    std::vector<double> site_seconds;
    void add(int site, int64_t b, double s);
    void add(const Traffic& t);
  };
  virtual Traffic take_traffic() = 0;

  // The layer the collectives that follow belong to, for the per-layer figures: 0 the embedding,
  // 1 + i block i, layers + 1 the head (its norm, the logits and the loss). A model sets it where
  // each part's forward starts (a recomputed forward too); the backward's functions set the site
  // their forward saw, so a gradient's collective counts where its activation's did.
  void set_site(int site) { site_ = site; }
  int site() const { return site_; }

 private:
  int site_ = 0;
};

// Megatron's f: the identity forward, the gradient all-reduced over the group backward (before a
// column-parallel layer, whose ranks each send back a part of the input's gradient).
torch::Tensor copy_to_tp(const torch::Tensor& x, TpGroup* g);
// Megatron's g: all-reduced over the group forward, the identity backward (after a row-parallel
// layer, whose ranks each hold a part of the sum).
torch::Tensor reduce_from_tp(const torch::Tensor& x, TpGroup* g);

// Megatron's sequence parallelism (the activations between layers cut along the sequence,
// dimension 1 of (B, T, C)): the all-gather before a column-parallel layer, whose backward
// reduce-scatters the input's gradient ...
torch::Tensor gather_from_sequence(const torch::Tensor& x, TpGroup* g);
// ... and the reduce-scatter after a row-parallel layer, whose backward all-gathers.
torch::Tensor reduce_scatter_to_sequence(const torch::Tensor& x, TpGroup* g);
// With sequence parallelism a replicated parameter (a norm's weight) sees only this rank's part of
// the sequence: its gradient is all-reduced over the group as it is made (a tensor hook, once per
// backward), so every rank holds the whole gradient, as Megatron's allreduce of the
// layer-norm gradients. `site`: the layer the parameter belongs to (TpGroup::set_site).
void sum_gradient_over_tp(torch::Tensor& param, TpGroup* g, int site);

// A column-parallel layer's input: the whole sequence on every rank (f: copy_to_tp; with sequence
// parallelism, gather_from_sequence). The identity without a group.
torch::Tensor column_input(const torch::Tensor& x, TpGroup* g, bool sequence_parallel);
// A row-parallel layer's output: each rank's partial product summed over the group (g:
// reduce_from_tp; with sequence parallelism reduce_scatter_to_sequence), then the bias, whole on
// every rank, added once. The layer as it is without a group.
torch::Tensor row_parallel(torch::nn::Linear l, const torch::Tensor& x, TpGroup* g,
                           bool sequence_parallel);

// A model's tensor-parallel slices of a whole model's tensors, by name: each of `m`'s parameters
// whose shape is 1/size of the whole one's along one dimension gets the rank-th part along it;
// `special` (if given) may slice a tensor itself (GPT-2's fused q/k/v) and returns an undefined
// tensor for the others. What matches no parameter is left for load_state to judge.
using SliceRule = std::function<torch::Tensor(const std::string& name, const torch::Tensor& whole,
                                              const torch::Tensor& mine)>;
TensorMap tp_slices_of(const torch::nn::Module& m, const TensorMap& whole, int64_t rank,
                       int64_t size, const SliceRule& special = {});

// The rows [first, first + rows) of an embedding table held by this rank: a token outside them
// looks up zeros, and the group's sum is the full lookup (reduce-scattered along the sequence
// with `sequence_parallel`).
torch::Tensor vocab_parallel_embedding(const torch::Tensor& tokens, const torch::Tensor& weight,
                                       int64_t first, TpGroup* g, bool sequence_parallel = false);

// Mean cross-entropy of the logits (..., V/T) over this rank's vocabulary slice starting at
// `first`, against the targets (...) (ignored where -1): the maximum, the sum of exponentials and
// the target's logit all-reduced (b·s each), as Megatron's vocab_parallel_cross_entropy.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           int64_t first, TpGroup* g);

}  // namespace dtune::models
