// The data-parallel step.
#include "train/data_parallel_step.h"

#include <torch/torch.h>

#include <filesystem>

#include "core/nvtx.h"
#include "train/run_monitor.h"
#include "train/zero.h"
#include "train/zero3.h"

namespace dtune::train {
namespace {

class DataParallelStep final : public StepStrategy {
 public:
  DataParallelStep(TrainSetup& s, const RunContext& ctx, std::unique_ptr<ZeroOptimizer> zero,
                   std::unique_ptr<Zero3Units> units)
      : s_(s), ctx_(ctx), zero_(std::move(zero)), units_(std::move(units)) {
    if (zero_ && s_.o.shard != ShardMode::kZero1 && s_.sync)  // zero2, zero3
      for (size_t b = 0; b < s_.sync->buckets(); ++b) parts_.push_back(s_.sync->bucket(b).shard);
    scatter_ = !parts_.empty();
  }
  std::string describe_step(int step) const override {
    return "training step " + std::to_string(step) + " (batch " + std::to_string(s_.batch) + ")";
  }
  double global_batch() const override {
    return static_cast<double>(s_.batch) * ctx_.world_size() * s_.o.accum_steps;
  }
  bool replicated() const override { return true; }
  void run_step(int step, StepRecord& rec, const FaultInjector& faults) override;
  void finish(TrainOutcome& out) override {
    if (s_.sync) out.bucket_bytes = s_.sync->layout().bytes;
    if (s_.grad_timer) {
      out.grad_ready_ms = s_.grad_timer->rows();
      out.param_bytes = s_.grad_timer->param_bytes();
    }
    out.data = s_.data->summary();
    if (units_) {
      // Between steps no unit is gathered: the fp32 master shard (in optimizer_state_bytes) is
      // the parameters' only copy. Per step each unit is gathered once (twice with reshard).
      out.optimizer_state_bytes = zero_->state_bytes();
      out.param_bytes_resident = units_->resident_bytes();
      out.param_bytes_peak = units_->peak_bytes();  // before gather_all raises it to the model
      out.gathered_bytes_per_step = gathered_;
      units_->gather_all();  // the final check and --debug-dump read the whole model
    } else if (zero_) {
      out.optimizer_state_bytes = zero_->state_bytes();
      out.gathered_bytes_per_step = zero_->gathered_bytes();
      out.param_bytes_resident = zero_->param_bytes();
    } else {
      out.optimizer_state_bytes = s_.optimizer->state_bytes();
      for (const auto& m : s_.master) out.optimizer_state_bytes += static_cast<int64_t>(m.nbytes());
      for (const auto& p : s_.params) out.param_bytes_resident += static_cast<int64_t>(p.nbytes());
    }
    // Every mode but zero3 holds its parameters throughout the step.
    if (!units_) out.param_bytes_peak = out.param_bytes_resident;
    for (const auto& p : s_.params)
      if (p.grad().defined()) out.grad_bytes_resident += static_cast<int64_t>(p.grad().nbytes());
    out.grad_bytes_peak = out.grad_bytes_resident;
    if (s_.sync) {
      out.grad_bytes_resident += s_.sync->resident_bytes();
      out.reduce_scattered_bytes_per_step = s_.sync->shard_bytes();
      out.grad_bytes_peak = s_.sync->take_peak_bytes();
    }
  }

 private:
  TrainSetup& s_;
  const RunContext& ctx_;
  std::unique_ptr<ZeroOptimizer> zero_;  // --shard: in place of s_.optimizer and s_.master
  std::unique_ptr<Zero3Units> units_;    // zero3: the parameters' units, gathered when used
  std::vector<torch::Tensor> parts_;     // zero2, zero3: the buckets' reduce-scattered shards
  int64_t gathered_ = 0;                 // zero3: bytes received by the last step's gathers
  bool scatter_ = false;                 // zero2, zero3: gradients reduce-scattered
};

void DataParallelStep::run_step(int step, StepRecord& rec, const FaultInjector& faults) {
  const Options& o = s_.o;
  models::Model& model = *s_.model;
  PhaseClock& clock = *s_.clock;
  LossScaler& scaler = *s_.scaler;
  clock.begin_step();
  if (units_) units_->take_gathered_bytes();
  if (zero_)
    zero_->zero_grad();
  else
    s_.optimizer->zero_grad();
  for (auto& p : s_.params) p.mutable_grad() = torch::Tensor();  // (the model's, with bf16 weights)
  clock.mark(Phase::kOptimizer);  // freeing last step's gradients is optimizer bookkeeping
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(s_.device));
  for (int m = 0; m < o.accum_steps; ++m) {
    Batch b = s_.data->next(m);
    clock.mark(Phase::kData);
    // Pinned host batches copy asynchronously; synthetic batches are on the device already.
    b.input = b.input.to(s_.device, /*non_blocking=*/true);
    b.target = b.target.to(s_.device, /*non_blocking=*/true);
    torch::Tensor input =
        o.channels_last ? b.input.contiguous(at::MemoryFormat::ChannelsLast) : b.input;
    clock.mark(Phase::kH2D);
    torch::Tensor loss;
    {
      NvtxRange range("forward");
      AutocastGuard autocast(o.precision, s_.device.type());
      loss = model.loss(units_ ? units_->forward(input) : model.forward(input), b.target);
    }
    loss_sum += loss.detach().to(torch::kFloat);
    clock.mark(Phase::kForward);
    if (s_.grad_timer) s_.grad_timer->begin(m == o.accum_steps - 1);
    // zero2 and zero3 reduce-scatter every micro-step, adding up the parts (GradSync::prepare).
    const bool last = m == o.accum_steps - 1;
    if (s_.sync) s_.sync->prepare(last || scatter_, scatter_ && m > 0);
    torch::Tensor objective = scaler.scale(loss / o.accum_steps);
    {
      NvtxRange range("backward");
      objective.backward();
    }
    if (units_) units_->release_all();
    clock.mark(Phase::kBackward);
    if (s_.sync && (last || scatter_)) {
      NvtxRange range("exposed communication");
      s_.sync->finish(Deadline::after_s(o.timeout_s));
      clock.mark(Phase::kComm);
    }
  }
  clock.mark(Phase::kComm);
  // Loss scaling: unscale, and skip the step on every rank if any gradient is inf/NaN.
  std::vector<torch::Tensor> grads;
  if (zero_) {
    // This rank's shard of the averaged gradients, in fp32: what it unscales and steps.
    grads.push_back(parts_.empty() ? zero_->collect_grads() : zero_->collect_grads(parts_));
    clock.mark(Phase::kOptimizer);
  } else {
    for (auto& p : s_.params)
      if (p.grad().defined()) grads.push_back(p.grad());
  }
  faults.after_reduction(step, grads);
  if (scaler.enabled()) {
    torch::Tensor found_inf = scaler.unscale(grads);
    if (s_.reducer) s_.reducer->allreduce_max(found_inf);
    rec.skipped = found_inf.item<float>() != 0.0f;
    scaler.update(found_inf);
  }
  clock.mark(Phase::kScaler);
  if (!rec.skipped) {
    NvtxRange range("optimizer");
    if (zero_)
      zero_->step();
    else
      optimizer_step(*s_.optimizer, s_.params, s_.master);
  }
  clock.mark(Phase::kOptimizer);
  if (zero_ && !units_ && !rec.skipped) {
    NvtxRange range("parameter all-gather");
    zero_->gather();
    clock.mark(Phase::kComm);  // exposed: nothing runs beside it
  }
  // Local SGD: ranks step on their own gradients; every H steps, after the step, the
  // parameters are averaged (timed as communication).
  if (s_.local_sgd.averages_after(step))
    average_parameters(*s_.reducer, s_.world, s_.params, s_.master);
  if (o.local_sgd_every > 0) clock.mark(Phase::kComm);
  rec.phases = clock.end_step(rec.total_ms);
  if (units_) gathered_ = units_->take_gathered_bytes();
  if (s_.grad_timer) s_.grad_timer->end_step();
  rec.loss = loss_sum.item<double>() / o.accum_steps;
}

}  // namespace

std::unique_ptr<StepStrategy> build_data_parallel(TrainSetup& s, const RunContext& ctx,
                                                  RunMonitor* monitor) {
  const Options& o = s.o;
  const bool probe = s.probe();
  models::Model& model = *s.model;
  RunMonitor::Armed armed;
  if (!probe) {
    armed = monitor->arm("setting up the gradient reducer and broadcasting the initial parameters");
    s.reducer = o.backend == SyncBackend::kNccl ? make_nccl_reducer(ctx, s.ordinal, o.timeout_s)
                                                : make_mpi_reducer(ctx, o.reduce_algo);
  }
  s.params = model.parameters();
  {
    // Parameters and buffers start equal on every rank (rank 0's), as DDP does.
    torch::NoGradGuard no_grad;
    if (s.world > 1) {
      for (auto& p : s.params) s.reducer->broadcast(p.data(), 0);
      for (auto& b : model.buffers()) s.reducer->broadcast(b, 0);
    }
  }
  armed.disarm();
  // bf16 weights: the optimizer updates an fp32 master copy, which is cast back after each step.
  // --shard: each rank's fp32 master shard and its optimizer state instead (below).
  const bool sharded = o.shard != ShardMode::kNone && !probe;
  if (!sharded) {
    if (o.weights_dtype == WeightsDtype::kBf16) s.master = make_master_copy(s.params);
    s.optimizer = make_fused_optimizer(o.optimizer, s.master.empty() ? s.params : s.master, o.lr);
  }

  // ZeRO-3: the units, whose buckets GradSync reduce-scatters (on one rank too).
  const bool zero3 = o.shard == ShardMode::kZero3 && !probe;
  std::unique_ptr<Zero3Units> units;
  if (zero3)
    units =
        std::make_unique<Zero3Units>(model, s.params, ctx.world_size(), ctx.rank(), *s.reducer,
                                     Zero3Units::Options{o.reshard_after_forward, o.shard_unit_mib,
                                                         o.shard_prefetch, o.timeout_s});
  if ((ctx.world_size() > 1 || zero3) && o.local_sgd_every == 0) {
    if (probe) {
      int64_t bytes = 0;
      for (const auto& p : s.params) bytes += p.numel() * static_cast<int64_t>(p.element_size());
      s.bucket_footprint =
          torch::empty({bytes}, torch::TensorOptions().dtype(torch::kByte).device(s.device));
    } else {
      s.sync.emplace(s.params, *s.reducer, ctx.world_size(), o,
                     o.shard == ShardMode::kZero2 || o.shard == ShardMode::kZero3,
                     units ? &units->layout() : nullptr);
    }
  }
  std::unique_ptr<ZeroOptimizer> zero;
  if (sharded)
    zero = std::make_unique<ZeroOptimizer>(
        s.params,
        o.shard != ShardMode::kZero1 && s.sync  // zero2, zero3
            ? bucket_shards(*s.sync, s.sync->buckets(), s.params, ctx.world_size())
            : flat_shards(s.params, ctx.world_size()),
        o.shard == ShardMode::kZero1 || !s.sync, *s.reducer, ctx.rank(), o.optimizer, o.lr,
        /*keep_master=*/zero3);
  if (units) units->shard(*s.sync, *zero);
  // After GradSync, so that its hooks run first (the times include the copy into the bucket).
  if (!probe) s.grad_timer.emplace(s.params, s.device.is_cuda() ? s.ordinal : -1);
  s.scaler.emplace(o.precision == Precision::kFp16, s.device);
  s.data = probe || o.data == "synthetic"
               ? make_synthetic_source(model, s.batch, o.accum_steps, ctx.rank(), o.seed, s.device)
               : make_loader_source(o, model, s.batch, ctx.rank(), ctx.world_size(), s.device);
  s.clock = make_phase_clock(make_timeline(s.device.is_cuda() ? s.ordinal : -1));
  if (!o.timing) s.clock = make_total_only_clock(std::move(s.clock));
  if (o.profile_steps > 0) {
    s.clock = make_traced_clock(std::move(s.clock), s.trace_log);
    if (s.reducer) s.reducer->set_trace(&s.trace_log);
    // --batch-sweep: one trace directory per batch, so runs do not overwrite each other's traces.
    const std::string dir =
        o.batch_sweep
            ? (std::filesystem::path(o.profile_dir) / ("b" + std::to_string(s.batch))).string()
            : o.profile_dir;
    s.profiler.emplace(o, ctx, s.device, s.trace_log, dir);
  }
  if (units) units->set_clock(s.clock.get());  // waits for gathers: exposed communication
  return std::make_unique<DataParallelStep>(s, ctx, std::move(zero), std::move(units));
}

}  // namespace dtune::train
