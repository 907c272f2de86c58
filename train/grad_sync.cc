// Bucketed, overlapped gradient averaging.
#include "train/grad_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "core/error.h"
#include "core/nvtx.h"
#include "train/fused_pack.h"

namespace dtune::train {

struct GradSync::DropGrad final : torch::autograd::PostAccumulateGradHook {
  DropGrad(GradSync& sync, size_t param) : sync_(sync), param_(param) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override { sync_.drop_grad(param_); }
  GradSync& sync_;
  size_t param_;
};

namespace {
torch::ScalarType wire_dtype(Compression c, torch::ScalarType param) {
  switch (c) {
    case Compression::kFp16:
      return torch::kHalf;
    case Compression::kBf16:
      return torch::kBFloat16;
    case Compression::kNone:
      return param;
  }
  return param;
}
}  // namespace

GradSync::GradSync(std::vector<torch::Tensor> params, Reducer& reducer, int world_size,
                   const Options& o, bool reduce_scatter, const BucketLayout* layout)
    : params_(std::move(params)),
      reducer_(reducer),
      world_(world_size),
      inv_world_(1.0 / world_size),
      scale_(static_cast<float>(inv_world_)),
      overlap_(o.overlap),
      reduce_scatter_(reduce_scatter) {
  std::vector<int64_t> bytes;
  for (const auto& p : params_) bytes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
  layout_ = layout ? *layout
                   : plan_buckets(bytes, static_cast<int64_t>(o.first_bucket_mb * (1 << 20)),
                                  static_cast<int64_t>(o.bucket_mb * (1 << 20)));
  where_.resize(params_.size());
  filled_.assign(params_.size(), false);
  for (size_t b = 0; b < layout_.params.size(); ++b) {
    Bucket bucket;
    bucket.params = layout_.params[b];
    int64_t elems = 0;
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const size_t i = bucket.params[slot];
      DTUNE_CHECK(params_[i].scalar_type() == params_[bucket.params[0]].scalar_type(),
                  "parameters of one bucket must share a dtype");
      where_[i] = {b, slot};
      bucket.offsets.push_back(elems);
      elems += params_[i].numel();
    }
    const auto& p0 = params_[bucket.params[0]];
    const auto wire = p0.options().dtype(wire_dtype(o.compression, p0.scalar_type()));
    if (reduce_scatter_) {  // the flat is allocated per step (flat_locked)
      elems = (elems + world_size - 1) / world_size * world_size;
      bucket.shard = torch::empty({elems / world_size}, wire);
    } else {
      bucket.flat = torch::zeros({elems}, wire);  // the padding stays zero
    }
    buckets_.push_back(std::move(bucket));
  }
  // The hook sees the gradient of this backward before autograd adds it to .grad.
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].register_hook([this, i](const torch::Tensor& grad) { on_grad(i, grad); });
  if (reduce_scatter_)
    for (size_t i = 0; i < params_.size(); ++i)
      torch::autograd::impl::set_post_acc_grad_hooks(params_[i],
                                                     std::make_unique<DropGrad>(*this, i));
}

void GradSync::drop_grad(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (sync_ && filled_[i]) params_[i].mutable_grad() = torch::Tensor();
}

torch::Tensor& GradSync::flat_locked(Bucket& bucket) {
  if (!bucket.flat.defined())  // the padding stays zero
    bucket.flat = torch::zeros({bucket.shard.numel() * world_}, bucket.shard.options());
  return bucket.flat;
}

void GradSync::sample_locked() {
  int64_t n = 0;
  for (const auto& p : params_)
    if (p.grad().defined()) n += static_cast<int64_t>(p.grad().nbytes());
  for (const auto& b : buckets_)
    for (const auto* t : {&b.flat, &b.shard, &b.incoming})
      if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  std::erase_if(in_flight_, [](const auto& f) { return f.first.expired(); });
  for (const auto& f : in_flight_) n += f.second;
  peak_ = std::max(peak_, n);
}

int64_t GradSync::take_peak_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  sample_locked();
  return std::exchange(peak_, 0);
}

void GradSync::prepare(bool sync, bool accumulate) {
  std::lock_guard<std::mutex> lock(mutex_);
  DTUNE_CHECK(!accumulate || (sync && reduce_scatter_),
              "GradSync: accumulating parts is for reduce-scatter micro-steps");
  sync_ = sync;
  accumulate_ = accumulate;
  next_launch_ = 0;
  filled_.assign(params_.size(), false);
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = false;
  }
}

void GradSync::copy_in(size_t i, const torch::Tensor& grad) {
  const auto [b, slot] = where_[i];
  Bucket& bucket = buckets_[b];
  torch::Tensor view = (reduce_scatter_ ? flat_locked(bucket) : bucket.flat)
                           .narrow(0, bucket.offsets[slot], params_[i].numel());
  torch::NoGradGuard no_grad;
  const torch::Tensor& acc = params_[i].grad();
  torch::Tensor total = acc.defined() ? grad.detach() + acc : grad.detach();
  // Pre-divided by the world size, as DDP does: the sum over ranks is then the average, and
  // fp16 buckets cannot overflow where the gradients themselves do not. One fused pass (scale and
  // cast), bit-identical to view.copy_(total.mul(inv_world_)), which stays as the fallback.
  if (!fused_pack({total.contiguous()}, view, scale_))
    view.copy_(total.reshape({-1}).mul(inv_world_));
  filled_[i] = true;
  ++bucket.ready;
}

void GradSync::pack_unfilled_locked() {
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    const size_t n = bucket.params.size();
    for (size_t slot = 0; slot < n;) {
      const size_t i = bucket.params[slot];
      if (filled_[i]) {
        ++slot;
        continue;
      }
      if (reduce_scatter_) flat_locked(bucket);
      if (!params_[i].grad().defined()) {  // no gradient at all: contributes zeros
        bucket.flat.narrow(0, bucket.offsets[slot], params_[i].numel()).zero_();
        filled_[i] = true;
        ++bucket.ready;
        ++slot;
        continue;
      }
      // The run of unfilled slots with gradients from here: packed in one pass (with overlap
      // off, the whole bucket).
      std::vector<torch::Tensor> grads;
      int64_t elems = 0;
      size_t end = slot;
      for (; end < n; ++end) {
        const size_t p = bucket.params[end];
        if (filled_[p] || !params_[p].grad().defined()) break;
        grads.push_back(params_[p].grad().contiguous());
        elems += params_[p].numel();
      }
      torch::Tensor view = bucket.flat.narrow(0, bucket.offsets[slot], elems);
      if (!fused_pack(grads, view, scale_))
        for (size_t k = 0; k < grads.size(); ++k)
          view.narrow(0, bucket.offsets[slot + k] - bucket.offsets[slot], grads[k].numel())
              .copy_(grads[k].reshape({-1}).mul(inv_world_));
      for (size_t k = slot; k < end; ++k) filled_[bucket.params[k]] = true;
      bucket.ready += end - slot;
      slot = end;
    }
  }
}

void GradSync::on_grad(size_t i, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (sync_ && overlap_ != Overlap::kOff && !filled_[i]) {
    copy_in(i, grad);
    launch_ready_locked();
  }
  sample_locked();
}

void GradSync::launch_ready_locked() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    buckets_[next_launch_].launched = true;
    nvtx_mark("bucket reduction start");
    Bucket& b = buckets_[next_launch_];
    if (reduce_scatter_) {
      // The reducer holds the flat until its reduce-scatter is done (MPI: its queue, until its
      // thread has reduced it; NCCL: until the event after it is done), then it is freed.
      in_flight_.emplace_back(b.flat.storage().getWeakStorageImpl(),
                              static_cast<int64_t>(b.flat.nbytes()));
      if (accumulate_) b.incoming = torch::empty_like(b.shard);
      reducer_.start_reduce_scatter(std::exchange(b.flat, torch::Tensor()),
                                    accumulate_ ? b.incoming : b.shard);
    } else
      reducer_.start(b.flat);
    ++next_launch_;
  }
}

void GradSync::finish(const Deadline& deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Parameters whose hook did not fire (overlap off, or unused in this forward) are taken from
  // .grad now; a parameter with no gradient at all contributes zeros.
  pack_unfilled_locked();
  launch_ready_locked();
  DTUNE_CHECK(next_launch_ == buckets_.size(), "gradient buckets left unlaunched");
  sample_locked();
  reducer_.wait_all(deadline);
  if (reduce_scatter_) {
    // This rank's parts are in the shards (this micro-step's added to the earlier ones'); the
    // whole gradients are not needed any more.
    torch::NoGradGuard no_grad;
    for (auto& b : buckets_)
      if (b.incoming.defined()) b.shard.add_(std::exchange(b.incoming, torch::Tensor()));
    for (auto& p : params_) p.mutable_grad() = torch::Tensor();
    for (auto& b : buckets_) b.flat = torch::Tensor();
    return;
  }
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    // One pass per bucket back into the gradients; a bucket with a non-contiguous gradient
    // (channels_last) is copied tensor by tensor.
    std::vector<torch::Tensor> grads;
    for (size_t i : bucket.params) {
      torch::Tensor& g = params_[i].mutable_grad();
      if (!g.defined()) g = torch::empty_like(params_[i]);
      grads.push_back(g);
    }
    if (fused_unpack(bucket.flat, grads)) continue;
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const size_t i = bucket.params[slot];
      grads[slot].copy_(
          bucket.flat.narrow(0, bucket.offsets[slot], params_[i].numel()).view(params_[i].sizes()));
    }
  }
}

int64_t GradSync::resident_bytes() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    for (const auto* t : {&b.flat, &b.shard})
      if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n;
}

int64_t GradSync::shard_bytes() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    if (b.shard.defined()) n += static_cast<int64_t>(b.shard.nbytes());
  return n;
}

}  // namespace dtune::train
