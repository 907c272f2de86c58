// ZeRO's first two stages (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", SC 2020): --shard zero1 shards the optimizer state (P_os), zero2 the
// gradients too (P_os+g). Each of the N ranks owns one shard of S elements of the parameters and
// keeps, for it alone, the fp32 master and the optimizer state (1/N of DDP's). After the gradient
// reduction each rank steps its shard; then the ranks all-gather the updated shards, in the
// parameters' dtype (bf16 weights: the fp32 master rounded, as DDP's master copy is cast back),
// into every rank's parameters.
//
// - zero1: the gradients are all-reduced as in DDP (GradSync); a shard is a contiguous range of the
//   parameters laid end to end in the model's order (flat_shards), the last one padded. The
//   parameters become views of one flat buffer (as DeepSpeed flattens them), so a shard is a view
//   of the parameters: with fp32 weights the optimizer steps it in place (no master copy), and the
//   gather is in place.
// - zero2: each gradient bucket is reduce-scattered (GradSync with reduce_scatter), so a rank only
//   ever receives its part of each bucket; its shard is part r of every bucket, in bucket order
//   (bucket_shards), scattered over the parameters. The whole gradients are dropped after the
//   reduction. With fp32 weights the shard's values are copied out of the parameters for the step
//   and freed after the gather (the parameters are the master). With --accum-steps the micro-steps
//   before the last accumulate whole gradients, as DDP's no_sync does.
//
// With bf16 weights the fp32 master shard stays between steps (1/N of DDP's master copy).
//
// SGD and AdamW are elementwise, so the parameters equal DDP's up to the vectorised kernels'
// rounding. A parameter without a gradient in a step is stepped with a zero gradient (DDP's
// optimizer leaves it alone); dtune's models give every parameter one.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "train/config.h"
#include "train/grad_sync.h"
#include "train/optimizer.h"
#include "train/reducer.h"

namespace dtune::train {

// Where the elements of every rank's shard live: for rank q, pieces in shard order.
struct ShardLayout {
  struct Piece {
    size_t param;
    int64_t param_offset, shard_offset, numel;
  };
  int64_t shard = 0;                      // S, equal on every rank (padding included)
  std::vector<std::vector<Piece>> ranks;  // [q]
};
// zero1: rank q owns elements [q S, (q + 1) S) of the parameters end to end, S = ceil(T / N).
ShardLayout flat_shards(const std::vector<torch::Tensor>& params, int world);
// zero2: rank q owns part q of each of sync's (padded) buckets, in bucket order.
ShardLayout bucket_shards(const GradSync& sync, size_t buckets,
                          const std::vector<torch::Tensor>& params, int world);

class ZeroOptimizer {
 public:
  // `contiguous`: the layout is flat_shards (zero1), and the parameters become views of one flat
  // buffer.
  // `keep_master`: the fp32 master shard stays between steps even with fp32 weights (ZeRO-3, whose
  // parameters are not resident).
  ZeroOptimizer(std::vector<torch::Tensor> params, ShardLayout layout, bool contiguous,
                Reducer& reducer, int rank, OptimizerKind kind, double lr,
                bool keep_master = false);
  // Drops the master shard's gradient (the parameters' are the caller's).
  void zero_grad() { optimizer_->zero_grad(); }
  // This rank's shard of the averaged gradients, in fp32, as the master's gradient: from the
  // parameters' gradients (zero1) or from `parts`, the buckets' reduce-scattered shards in bucket
  // order (zero2). The loss scaler unscales it and the optimizer steps it.
  torch::Tensor collect_grads();
  torch::Tensor collect_grads(const std::vector<torch::Tensor>& parts);
  void step() { optimizer_->step(); }
  // Collective: every rank's updated shard into every rank's parameters; the master's gradient
  // (and a transient master) freed.
  void gather();
  // Resident between steps on this rank: the optimizer state and a kept fp32 master shard.
  int64_t state_bytes() const;
  // Bytes this rank receives in one gather (N - 1 shards in the parameters' dtype).
  int64_t gathered_bytes() const;
  // Bytes the parameters occupy on this rank (zero1: the flat buffer, padding included).
  int64_t param_bytes() const;
  // The fp32 master shard (ZeRO-3 gathers each unit's parameters from its part).
  const torch::Tensor& master() const { return master_; }

 private:
  void materialize_master();  // a transient master: its values from the parameters

  std::vector<torch::Tensor> params_;
  ShardLayout layout_;
  Reducer& reducer_;
  int rank_;
  torch::Tensor flat_;  // zero1: (N S,) in the parameters' dtype, which are views of it
  torch::Tensor own_;   // zero1: this rank's part of flat_
  // (S,) fp32, what the optimizer steps: zero1 with fp32 weights, own_ itself; bf16 weights, a
  // kept copy; zero2 with fp32 weights, a copy only during the step (empty between steps).
  torch::Tensor master_;
  bool master_kept_ = false;
  bool master_transient_ = false;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace dtune::train
