// Replicated parameters and ZeRO's three stages, behind one set of hooks.
#include "train/param_sharding.h"

#include <torch/torch.h>

#include "core/error.h"
#include "train/optimizer.h"
#include "train/setup.h"
#include "train/zero.h"
#include "train/zero3.h"

namespace dtune::train {
namespace {

int64_t bytes_of(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += static_cast<int64_t>(t.nbytes());
  return n;
}

// DDP: the optimizer steps every parameter (or its fp32 master copy, bf16 weights) on every rank.
class Replicated final : public ParamSharding {
 public:
  explicit Replicated(TrainSetup& s) : s_(s) {}
  // The master copy's gradients (bf16 weights) go; with fp32 weights the optimizer's parameters
  // are the model's, whose .grad the step itself drops or zeroes.
  void begin_step() override {
    for (auto& m : s_.master) m.mutable_grad() = torch::Tensor();
  }
  std::vector<torch::Tensor> grads() override {
    std::vector<torch::Tensor> g;
    for (auto& p : s_.params)
      if (p.grad().defined()) g.push_back(p.grad());
    return g;
  }
  void step() override { optimizer_step(*s_.optimizer, s_.params, s_.master); }
  void finish(TrainOutcome& out) override {
    out.optimizer_state_bytes = s_.optimizer->state_bytes() + bytes_of(s_.master);
    out.param_bytes_resident = bytes_of(s_.params);
    out.param_bytes_peak = out.param_bytes_resident;  // held throughout the step
  }

 private:
  TrainSetup& s_;
};

// zero1, zero2: this rank steps its shard; the parameters are gathered whole after the step.
class ShardedState final : public ParamSharding {
 public:
  ShardedState(std::unique_ptr<ZeroOptimizer> zero, std::vector<torch::Tensor> parts)
      : zero_(std::move(zero)), parts_(std::move(parts)) {}
  void begin_step() override { zero_->zero_grad(); }
  bool reduce_scatters() const override { return !parts_.empty(); }
  std::vector<torch::Tensor> grads() override {
    return {parts_.empty() ? zero_->collect_grads() : zero_->collect_grads(parts_)};
  }
  void step() override { zero_->step(); }
  bool gather() override {
    zero_->gather();
    return true;
  }
  void finish(TrainOutcome& out) override {
    out.optimizer_state_bytes = zero_->state_bytes();
    out.gathered_bytes_per_step = zero_->gathered_bytes();
    out.param_bytes_resident = zero_->param_bytes();
    out.param_bytes_peak = out.param_bytes_resident;  // held throughout the step
  }

 private:
  std::unique_ptr<ZeroOptimizer> zero_;
  std::vector<torch::Tensor> parts_;  // zero2: the buckets' reduce-scattered shards
};

// zero3: the parameters themselves are sharded by unit and gathered where the forward and the
// backward use them.
class ShardedParams final : public ParamSharding {
 public:
  ShardedParams(std::unique_ptr<ZeroOptimizer> zero, std::unique_ptr<Zero3Units> units,
                std::vector<torch::Tensor> parts)
      : zero_(std::move(zero)), units_(std::move(units)), parts_(std::move(parts)) {}
  void begin_step() override {
    units_->take_gathered_bytes();
    zero_->zero_grad();
  }
  torch::Tensor forward(models::Model&, const torch::Tensor& input) override {
    return units_->forward(input);
  }
  torch::Tensor forward_chunk(const std::vector<models::Piece>& pieces, size_t begin, size_t end,
                              torch::Tensor x) override {
    DTUNE_CHECK(end - begin == units_->pieces(),
                "--shard zero3: a stage's units run its one chunk");
    return units_->forward(x);
  }
  bool reduce_scatters() const override { return true; }
  void after_backward() override { units_->release_all(); }
  std::vector<torch::Tensor> grads() override { return {zero_->collect_grads(parts_)}; }
  void step() override { zero_->step(); }
  void end_step() override { gathered_ = units_->take_gathered_bytes(); }
  void set_clock(PhaseClock* clock) override { units_->set_clock(clock); }
  void finish(TrainOutcome& out) override {
    // Between steps no unit is gathered: the fp32 master shard (in optimizer_state_bytes) is the
    // parameters' only copy. Per step each unit is gathered once (twice with reshard).
    out.optimizer_state_bytes = zero_->state_bytes();
    out.param_bytes_resident = units_->resident_bytes();
    out.param_bytes_peak = units_->peak_bytes();  // before gather_all raises it to the model
    out.gathered_bytes_per_step = gathered_;
    units_->gather_all();
  }

 private:
  std::unique_ptr<ZeroOptimizer> zero_;
  std::unique_ptr<Zero3Units> units_;
  std::vector<torch::Tensor> parts_;
  int64_t gathered_ = 0;  // bytes received by the last step's gathers
};

std::vector<torch::Tensor> bucket_parts(const GradSync& sync) {
  std::vector<torch::Tensor> parts;
  for (size_t b = 0; b < sync.buckets(); ++b) parts.push_back(sync.bucket(b).shard);
  return parts;
}

}  // namespace

std::unique_ptr<ParamSharding> build_param_sharding(TrainSetup& s, int dp, int dp_rank,
                                                    bool with_sync) {
  const Options& o = s.o;
  const ShardMode mode = s.probe() ? ShardMode::kNone : o.shard;  // a probe measures unsharded
  const bool scatter = mode == ShardMode::kZero2 || mode == ShardMode::kZero3;
  if (mode == ShardMode::kNone) {
    // bf16 weights: the optimizer updates an fp32 master copy, cast back after each step.
    if (o.weights_dtype == WeightsDtype::kBf16) s.master = make_master_copy(s.params);
    s.optimizer = make_fused_optimizer(o.optimizer, s.master.empty() ? s.params : s.master, o.lr);
    if (with_sync) s.sync.emplace(s.params, *s.reducer, dp, o);
    return std::make_unique<Replicated>(s);
  }
  // zero3: the units, whose buckets GradSync reduce-scatters (on one rank too).
  std::unique_ptr<Zero3Units> units;
  const Zero3Units::Options uo{o.reshard_after_forward, o.shard_unit_mib, o.shard_prefetch,
                               o.timeout_s};
  if (mode == ShardMode::kZero3)
    units = s.stage_pieces.empty()
                ? std::make_unique<Zero3Units>(*s.model, s.params, dp, dp_rank, *s.reducer, uo)
                : std::make_unique<Zero3Units>(s.stage_pieces, s.stage_param_names, s.params, dp,
                                               dp_rank, *s.reducer, uo);
  if (with_sync || units)
    s.sync.emplace(s.params, *s.reducer, dp, o, scatter, units ? &units->layout() : nullptr);
  // zero2 and zero3 own part r of each bucket; zero1 (and zero2 without a sync: one rank) a
  // contiguous range of the parameters end to end.
  const bool by_bucket = scatter && s.sync;
  auto zero = std::make_unique<ZeroOptimizer>(
      s.params,
      by_bucket ? bucket_shards(*s.sync, s.sync->buckets(), s.params, dp)
                : flat_shards(s.params, dp),
      !by_bucket, *s.reducer, dp_rank, o.optimizer, o.lr, /*keep_master=*/units != nullptr);
  std::vector<torch::Tensor> parts =
      by_bucket ? bucket_parts(*s.sync) : std::vector<torch::Tensor>{};
  if (!units) return std::make_unique<ShardedState>(std::move(zero), std::move(parts));
  units->shard(*s.sync, *zero);
  return std::make_unique<ShardedParams>(std::move(zero), std::move(units), std::move(parts));
}

void account_gradients(TrainSetup& s, TrainOutcome& out) {
  out.grad_bytes_resident = 0;
  for (const auto& p : s.params)
    if (p.grad().defined()) out.grad_bytes_resident += static_cast<int64_t>(p.grad().nbytes());
  out.grad_bytes_peak = out.grad_bytes_resident;
  if (s.sync) {
    out.bucket_bytes = s.sync->layout().bytes;
    out.grad_bytes_resident += s.sync->resident_bytes();
    out.reduce_scattered_bytes_per_step = s.sync->shard_bytes();
    out.grad_bytes_peak = s.sync->take_peak_bytes();
  }
}

}  // namespace dtune::train
