// The data-parallel step.
#include "train/data_parallel_step.h"

#include <torch/torch.h>

#include "core/nvtx.h"
#include "train/memory_meter.h"
#include "train/mesh.h"
#include "train/param_sharding.h"
#include "train/run_monitor.h"

namespace dtune::train {
namespace {

class DataParallelStep final : public StepStrategy {
 public:
  explicit DataParallelStep(TrainSetup& s) : s_(s) {}
  std::string describe_step(int step) const override {
    return "training step " + std::to_string(step) + " (batch " + std::to_string(s_.batch) + ")";
  }
  double global_batch() const override {
    return static_cast<double>(s_.batch) * s_.mesh->degree(MeshAxis::kDp) * s_.o.accum_steps;
  }
  bool replicated() const override { return true; }
  void run_step(int step, StepRecord& rec, const FaultInjector& faults) override;
  void finish(TrainOutcome& out) override {
    if (s_.grad_timer) {
      out.grad_ready_ms = s_.grad_timer->rows();
      out.param_bytes = s_.grad_timer->param_bytes();
    }
    out.data = s_.data->summary();
    s_.sharding->finish(out);
    account_gradients(s_, out);
    out.activation_bytes = activation_bytes_;
    out.recompute_ms_per_step = measured_steps_ > 0 ? 1e3 * recompute_s_ / measured_steps_ : 0.0;
    out.attention_backend = s_.model->attention_backend();
  }

 private:
  TrainSetup& s_;
  // The most bytes a micro-step's forward and loss allocated and still held when its backward
  // began (the activations saved for the backward, the logits, the loss), over every micro-step.
  int64_t activation_bytes_ = 0;
  double recompute_s_ = 0;  // activation checkpointing's recomputation in the measured steps
  int measured_steps_ = 0;
};

void DataParallelStep::run_step(int step, StepRecord& rec, const FaultInjector& faults) {
  const Options& o = s_.o;
  models::Model& model = *s_.model;
  PhaseClock& clock = *s_.clock;
  LossScaler& scaler = *s_.scaler;
  ParamSharding& sharding = *s_.sharding;
  clock.begin_step();
  sharding.begin_step();
  for (auto& p : s_.params) p.mutable_grad() = torch::Tensor();  // (the model's, with bf16 weights)
  clock.mark(Phase::kOptimizer);  // freeing last step's gradients is optimizer bookkeeping
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(s_.device));
  // zero2 and zero3 reduce-scatter every micro-step, adding up the parts (GradSync::prepare).
  const bool scatter = sharding.reduce_scatters();
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
    const int64_t held_before = TensorMemory::current_bytes(s_.ordinal);
    {
      NvtxRange range("forward");
      AutocastGuard autocast(o.precision, s_.device.type());
      loss = model.loss(sharding.forward(model, input), b.target);
    }
    activation_bytes_ =
        std::max(activation_bytes_, TensorMemory::current_bytes(s_.ordinal) - held_before);
    loss_sum += loss.detach().to(torch::kFloat);
    clock.mark(Phase::kForward);
    if (s_.grad_timer) s_.grad_timer->begin(m == o.accum_steps - 1);
    const bool last = m == o.accum_steps - 1;
    if (s_.sync) s_.sync->prepare(last || scatter, scatter && m > 0);
    torch::Tensor objective = scaler.scale(loss / o.accum_steps);
    {
      NvtxRange range("backward");
      objective.backward();
    }
    sharding.after_backward();
    clock.mark(Phase::kBackward);
    if (s_.sync && (last || scatter)) {
      NvtxRange range("exposed communication");
      s_.sync->finish(Deadline::after_s(o.timeout_s));
      clock.mark(Phase::kComm);
    }
  }
  clock.mark(Phase::kComm);
  const double recompute_s = model.take_recompute_seconds();
  if (step >= o.warmup_steps) {
    recompute_s_ += recompute_s;
    ++measured_steps_;
  }
  // Loss scaling: unscale, and skip the step on every rank if any gradient is inf/NaN. A sharded
  // rank unscales its fp32 shard of the averaged gradients (collecting it is optimizer work).
  std::vector<torch::Tensor> grads = sharding.grads();
  clock.mark(Phase::kOptimizer);
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
    sharding.step();
  }
  clock.mark(Phase::kOptimizer);
  if (!rec.skipped) {
    NvtxRange range("parameter all-gather");
    if (sharding.gather()) clock.mark(Phase::kComm);  // exposed: nothing runs beside it
  }
  // Local SGD: ranks step on their own gradients; every H steps, after the step, the
  // parameters are averaged (timed as communication).
  if (s_.local_sgd.averages_after(step))
    average_parameters(*s_.reducer, s_.world, s_.params, s_.master);
  if (o.local_sgd_every > 0) clock.mark(Phase::kComm);
  rec.phases = clock.end_step(rec.total_ms);
  sharding.end_step();
  if (s_.grad_timer) s_.grad_timer->end_step();
  rec.loss = loss_sum.item<double>() / o.accum_steps;
}

}  // namespace

std::unique_ptr<StepStrategy> build_data_parallel(TrainSetup& s, const RunContext& ctx,
                                                  RunMonitor* monitor) {
  const Options& o = s.o;
  const bool probe = s.probe();
  s.params = s.model->parameters();
  build_shared_parts(s, ctx, monitor);
  const int run_dp =
      make_mesh_shape(ctx.world_size(), o.tp, o.pipeline.stages, o.mesh_order)[MeshAxis::kDp];
  if (probe && run_dp > 1 && o.local_sgd_every == 0) {
    // What the run's buckets will hold (a data axis of more than one rank: tensor-parallel ranks
    // alone reduce nothing), allocated: the probe learns whether the batch fits beside them.
    int64_t bytes = 0;
    for (const auto& p : s.params) bytes += p.numel() * static_cast<int64_t>(p.element_size());
    s.bucket_footprint =
        torch::empty({bytes}, torch::TensorOptions().dtype(torch::kByte).device(s.device));
  }
  // After GradSync, so that its hooks run first (the times include the copy into the bucket).
  if (!probe) s.grad_timer.emplace(s.params, s.device.is_cuda() ? s.ordinal : -1);
  s.clock = make_phase_clock(make_timeline(s.device.is_cuda() ? s.ordinal : -1));
  if (!o.timing) s.clock = make_total_only_clock(std::move(s.clock));
  if (o.profile_steps > 0) {
    s.clock = make_traced_clock(std::move(s.clock), s.trace_log);
    if (s.reducer) s.reducer->set_trace(&s.trace_log);
  }
  s.sharding->set_clock(s.clock.get());  // zero3 waits for gathers: exposed communication
  return std::make_unique<DataParallelStep>(s);
}

}  // namespace dtune::train
