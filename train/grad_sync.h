// dtune's DistributedDataParallel for LibTorch (which has none): gradients are packed into
// buckets in the reverse of parameter order (the order backward produces them) with a cap per
// bucket and a smaller first bucket (PyTorch DDP: 25 MiB and 1 MiB). A hook on every parameter
// copies its gradient into its bucket as soon as autograd computes it (scaled by 1/world and cast
// to the wire dtype in one fused pass, kernels/bucket_pack.h; gradients the hooks did not see are
// packed a bucket per pass in finish(), and one pass per bucket unpacks); when a bucket and all
// buckets before it are full, its reduction starts, so communication overlaps the rest of
// backward. Buckets are launched strictly in index order on every rank, so collectives match.
// Accumulation micro-steps skip all of this (no_sync) until the last one.
#pragma once

#include <c10/core/StorageImpl.h>
#include <torch/nn/module.h>

#include <mutex>
#include <utility>
#include <vector>

#include "models/bucket_plan.h"
#include "train/config.h"
#include "train/reducer.h"

namespace dtune::train {

using models::BucketLayout;  // models/bucket_plan.h
using models::plan_buckets;

class GradSync {
 public:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
    torch::Tensor flat;            // the bucket, in the communication dtype (reduce-scatter: padded
                                   // with zeros to a multiple of the ranks)
    torch::Tensor shard;           // reduce-scatter: this rank's part of the sum (flat / ranks)
    torch::Tensor incoming;        // reduce-scatter while accumulating: this micro-step's part
    size_t ready = 0;
    bool launched = false;
  };
  // `reduce_scatter` (ZeRO-2, train/zero.h): each bucket is reduce-scattered instead of
  // all-reduced; finish() leaves the average's parts in the buckets' `shard`s and drops the
  // parameters' gradients and the buckets' `flat`s (allocated again by the next prepare(true))
  // instead of unpacking into them: between steps a rank holds only its parts. During backward
  // a bucket's flat is allocated when its first gradient arrives and let go of once its
  // reduce-scatter is started (the reducer frees it when done), and a parameter's .grad is dropped
  // right after autograd sets it (a post-accumulate hook; the gradient is in the flat already): a
  // rank holds its parts plus the buckets not yet reduced, not the whole model's gradients.
  // `layout`: the buckets as given (ZeRO-3: one per unit) instead of plan_buckets' caps.
  GradSync(std::vector<torch::Tensor> params, Reducer& reducer, int world_size, const Options& o,
           bool reduce_scatter = false, const BucketLayout* layout = nullptr);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Call before each micro-step's backward: `sync` is false for accumulation micro-steps. With
  // reduce-scatter every micro-step syncs (as FSDP2 and DeepSpeed's ZeRO-2/3 reduce-scatter each
  // micro-batch, so that no rank holds the whole gradients across micro-steps): `accumulate` on
  // the micro-steps after the first, whose parts finish() adds to the parts already reduced.
  void prepare(bool sync, bool accumulate = false);
  // After backward: launches what the hooks did not (overlap off; unused parameters), waits for
  // every reduction, and leaves the average over ranks in each parameter's .grad.
  void finish(const Deadline& deadline);

  size_t buckets() const { return buckets_.size(); }
  const Bucket& bucket(size_t b) const { return buckets_[b]; }
  const BucketLayout& layout() const { return layout_; }
  // Bytes the buckets hold now (flats and shards).
  int64_t resident_bytes() const;
  // Reduce-scatter: the bytes of this rank's parts (what it receives per step).
  int64_t shard_bytes() const;
  // The most gradient bytes held at once since the last call: the parameters' .grad, the
  // buckets' flats and shards, and the flats of reductions still in flight, sampled after each
  // gradient hook and when backward ends.
  int64_t take_peak_bytes();

 private:
  void on_grad(size_t param, const torch::Tensor& grad);
  void copy_in(size_t param, const torch::Tensor& grad);  // grad (+ accumulated .grad) / world
  void pack_unfilled_locked();  // every parameter not yet in its bucket, a run per pass
  void launch_ready_locked();
  torch::Tensor& flat_locked(Bucket& bucket);  // reduce-scatter: allocated on first use per step
  void sample_locked();                        // the gradient bytes held now, into peak_
  void drop_grad(size_t param);                // after autograd accumulated it (reduce-scatter)
  struct DropGrad;                             // the post-accumulate hook calling it

  std::vector<torch::Tensor> params_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<bool> filled_;
  std::vector<Bucket> buckets_;
  BucketLayout layout_;
  Reducer& reducer_;
  int world_;
  double inv_world_;
  float scale_;  // inv_world_ as torch's mul computes with it (a float for float tensors)
  Overlap overlap_;
  bool reduce_scatter_;
  bool sync_ = true;
  bool accumulate_ = false;
  size_t next_launch_ = 0;
  // Reduce-scatter: the flats handed to the reducer, freed when it lets go of them.
  std::vector<std::pair<c10::weak_intrusive_ptr<c10::StorageImpl>, int64_t>> in_flight_;
  int64_t peak_ = 0;
  std::mutex mutex_;
};

}  // namespace dtune::train
