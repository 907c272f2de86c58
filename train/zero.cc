// ZeRO-1 and ZeRO-2's sharded optimizer.
#include "train/zero.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/error.h"

namespace dtune::train {
namespace {

// The pieces of parameter `param` (`numel` elements at `from` in a space) that fall in
// [lo, lo + len) of that space, placed at `at` + (their position - lo) in the shard.
void overlap(size_t param, int64_t from, int64_t numel, int64_t lo, int64_t len, int64_t at,
             std::vector<ShardLayout::Piece>& out) {
  const int64_t a = std::max(from, lo), b = std::min(from + numel, lo + len);
  if (a < b) out.push_back({param, a - from, at + (a - lo), b - a});
}

}  // namespace

ShardLayout flat_shards(const std::vector<torch::Tensor>& params, int world) {
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  ShardLayout l;
  l.shard = (total + world - 1) / world;
  l.ranks.resize(world);
  for (int q = 0; q < world; ++q) {
    int64_t from = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      overlap(i, from, params[i].numel(), q * l.shard, l.shard, 0, l.ranks[q]);
      from += params[i].numel();
    }
  }
  return l;
}

ShardLayout bucket_shards(const GradSync& sync, size_t buckets,
                          const std::vector<torch::Tensor>& params, int world) {
  ShardLayout l;
  l.ranks.resize(world);
  for (size_t b = 0; b < buckets; ++b) {
    const GradSync::Bucket& bucket = sync.bucket(b);
    const int64_t part = bucket.shard.numel();
    for (int q = 0; q < world; ++q)
      for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
        const size_t i = bucket.params[slot];
        overlap(i, bucket.offsets[slot], params[i].numel(), q * part, part, l.shard, l.ranks[q]);
      }
    l.shard += part;
  }
  return l;
}

ZeroOptimizer::ZeroOptimizer(std::vector<torch::Tensor> params, ShardLayout layout, bool contiguous,
                             Reducer& reducer, int rank, OptimizerKind kind, double lr,
                             bool keep_master)
    : params_(std::move(params)), layout_(std::move(layout)), reducer_(reducer), rank_(rank) {
  DTUNE_CHECK(!params_.empty(), "--shard: no parameters");
  for (const auto& p : params_)
    DTUNE_CHECK(p.scalar_type() == params_.front().scalar_type() && p.is_contiguous(),
                "--shard: parameters of one dtype, contiguous (not channels-last)");
  const auto opts = params_.front().options();
  const auto fp32 = opts.dtype(torch::kFloat);
  const bool fp32_weights = params_.front().scalar_type() == torch::kFloat;
  const int world = static_cast<int>(layout_.ranks.size());
  torch::NoGradGuard no_grad;
  if (contiguous) {
    flat_ = torch::zeros({layout_.shard * world}, opts);  // the padding stays 0
    int64_t at = 0;
    for (auto& p : params_) {
      torch::Tensor view = flat_.narrow(0, at, p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
      at += p.numel();
    }
    own_ = flat_.narrow(0, rank_ * layout_.shard, layout_.shard);
  }
  if (contiguous && fp32_weights) {
    master_ = own_;
  } else {
    master_ = torch::zeros({layout_.shard}, fp32);
    // zero2: the parameters hold the values between steps
    master_transient_ = fp32_weights && !keep_master;
    master_kept_ = !master_transient_;
    if (master_kept_) {
      if (contiguous)
        master_.copy_(own_);
      else
        for (const auto& pc : layout_.ranks[rank_])
          master_.narrow(0, pc.shard_offset, pc.numel)
              .copy_(params_[pc.param].detach().view({-1}).narrow(0, pc.param_offset, pc.numel));
    } else {
      master_.set_(torch::empty({0}, fp32));
    }
  }
  optimizer_ = make_fused_optimizer(kind, {master_}, lr);
}

void ZeroOptimizer::materialize_master() {
  if (!master_transient_) return;
  master_.set_(torch::zeros({layout_.shard}, params_.front().options().dtype(torch::kFloat)));
  for (const auto& pc : layout_.ranks[rank_])
    master_.narrow(0, pc.shard_offset, pc.numel)
        .copy_(params_[pc.param].detach().view({-1}).narrow(0, pc.param_offset, pc.numel));
}

torch::Tensor ZeroOptimizer::collect_grads() {
  torch::NoGradGuard no_grad;
  materialize_master();
  torch::Tensor grad = torch::zeros({layout_.shard}, master_.options());
  for (const auto& pc : layout_.ranks[rank_]) {
    const torch::Tensor& g = params_[pc.param].grad();
    if (g.defined())
      grad.narrow(0, pc.shard_offset, pc.numel)
          .copy_(g.reshape({-1}).narrow(0, pc.param_offset, pc.numel));
  }
  master_.mutable_grad() = grad;
  return grad;
}

torch::Tensor ZeroOptimizer::collect_grads(const std::vector<torch::Tensor>& parts) {
  torch::NoGradGuard no_grad;
  materialize_master();
  torch::Tensor grad = torch::cat(parts).to(torch::kFloat);
  DTUNE_CHECK(grad.numel() == layout_.shard, "--shard zero2: the buckets' parts are not a shard");
  master_.mutable_grad() = grad;
  return grad;
}

void ZeroOptimizer::gather() {
  torch::NoGradGuard no_grad;
  master_.mutable_grad() = torch::Tensor();
  if (flat_.defined()) {
    if (!own_.is_same(master_)) own_.copy_(master_);  // bf16 weights: the master rounded
    reducer_.allgather_in_place(flat_);               // the parameters are views of flat_
    return;
  }
  const int64_t world = static_cast<int64_t>(layout_.ranks.size());
  torch::Tensor full = torch::empty({layout_.shard * world}, params_.front().options());
  full.narrow(0, rank_ * layout_.shard, layout_.shard).copy_(master_);
  reducer_.allgather_in_place(full);
  for (size_t q = 0; q < layout_.ranks.size(); ++q)
    for (const auto& pc : layout_.ranks[q])
      params_[pc.param]
          .view({-1})
          .narrow(0, pc.param_offset, pc.numel)
          .copy_(
              full.narrow(0, static_cast<int64_t>(q) * layout_.shard + pc.shard_offset, pc.numel));
  if (master_transient_) master_.set_(torch::empty({0}, master_.options()));
}

int64_t ZeroOptimizer::state_bytes() const {
  return optimizer_->state_bytes() + (master_kept_ ? static_cast<int64_t>(master_.nbytes()) : 0);
}

int64_t ZeroOptimizer::gathered_bytes() const {
  return (static_cast<int64_t>(layout_.ranks.size()) - 1) * layout_.shard *
         static_cast<int64_t>(params_.front().element_size());
}

int64_t ZeroOptimizer::param_bytes() const {
  if (flat_.defined()) return static_cast<int64_t>(flat_.nbytes());
  int64_t n = 0;
  for (const auto& p : params_) n += static_cast<int64_t>(p.nbytes());
  return n;
}

}  // namespace dtune::train
