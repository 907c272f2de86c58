// The training loop.
#include "train/trainer.h"

#include <sys/resource.h>
#include <torch/torch.h>

#include <new>
#include <string>

#include "core/error.h"
#include "core/nvtx.h"
#include "models/registry.h"
#include "train/cuda_memory.h"
#include "train/memory_meter.h"
#include "train/observers.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/run_monitor.h"

namespace dtune::train {
namespace {

int64_t process_peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

Trainer::Trainer(TrainSetup& setup, const RunContext& ctx, RunMonitor* monitor)
    : s_(setup),
      ctx_(ctx),
      monitor_(monitor),
      local_sgd_(setup.o.local_sgd_every, setup.world),
      faults_(setup.o, ctx.rank()) {
  const Options& o = s_.o;
  out_.batch = s_.batch;
  // Added outermost first: begin_step runs in this order, end_step in the reverse one.
  if (monitor_) observers_.push_back(std::make_unique<MonitorObserver>(*monitor_, s_.batch));
  if (s_.profiler) observers_.push_back(std::make_unique<ProfilerObserver>(*s_.profiler));
  if (!s_.probe() && !o.tensorboard_dir.empty()) {
    const double global_batch = static_cast<double>(s_.batch) * ctx_.world_size() * o.accum_steps;
    observers_.push_back(std::make_unique<TensorBoardObserver>(o.tensorboard_dir, ctx_.rank(),
                                                               global_batch, s_.scaler->enabled()));
  }
  auto guard = std::make_unique<DivergenceGuard>(ctx_, s_.params, s_.probe() ? 0 : o.check_every,
                                                 local_sgd_);
  divergence_ = guard.get();
  observers_.push_back(std::move(guard));
}

bool Trainer::step(int step) {
  StepRecord rec;
  for (auto& obs : observers_) obs->begin_step(step, rec);
  rec.loss_scale = s_.scaler->current();
  run_step(step, rec);
  faults_.after_step(step, s_.params);
  check_memory();
  out_.steps.push_back(rec);
  for (auto it = observers_.rbegin(); it != observers_.rend(); ++it)
    (*it)->end_step(step, rec, out_);
  return out_.diverged.empty() && !out_.interrupted;  // on every rank: the verdict was shared
}

void Trainer::run_step(int step, StepRecord& rec) {
  const Options& o = s_.o;
  models::Model& model = *s_.model;
  PhaseClock& clock = *s_.clock;
  LossScaler& scaler = *s_.scaler;
  clock.begin_step();
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
      loss = model.loss(model.forward(input), b.target);
    }
    loss_sum += loss.detach().to(torch::kFloat);
    clock.mark(Phase::kForward);
    if (s_.grad_timer) s_.grad_timer->begin(m == o.accum_steps - 1);
    if (s_.sync) s_.sync->prepare(m == o.accum_steps - 1);
    torch::Tensor objective = scaler.scale(loss / o.accum_steps);
    {
      NvtxRange range("backward");
      objective.backward();
    }
    clock.mark(Phase::kBackward);
  }
  if (s_.sync) {
    NvtxRange range("exposed communication");
    s_.sync->finish(Deadline::after_s(o.timeout_s));
  }
  clock.mark(Phase::kComm);
  // Loss scaling: unscale, and skip the step on every rank if any gradient is inf/NaN.
  std::vector<torch::Tensor> grads;
  for (auto& p : s_.params)
    if (p.grad().defined()) grads.push_back(p.grad());
  faults_.after_reduction(step, grads);
  if (scaler.enabled()) {
    torch::Tensor found_inf = scaler.unscale(grads);
    if (s_.reducer) s_.reducer->allreduce_max(found_inf);
    rec.skipped = found_inf.item<float>() != 0.0f;
    scaler.update(found_inf);
  }
  clock.mark(Phase::kScaler);
  if (!rec.skipped) {
    NvtxRange range("optimizer");
    optimizer_step(*s_.optimizer, s_.params, s_.master);
  }
  clock.mark(Phase::kOptimizer);
  // Local SGD: ranks step on their own gradients; every H steps, after the step, the
  // parameters are averaged (timed as communication).
  if (local_sgd_.averages_after(step))
    average_parameters(*s_.reducer, s_.world, s_.params, s_.master);
  if (o.local_sgd_every > 0) clock.mark(Phase::kComm);
  rec.phases = clock.end_step(rec.total_ms);
  if (s_.grad_timer) s_.grad_timer->end_step();
  rec.loss = loss_sum.item<double>() / o.accum_steps;
}

void Trainer::check_memory() const {
  const int64_t limit_bytes = static_cast<int64_t>(s_.o.memory_limit_mb * (1 << 20));
  const int64_t cpu_peak = CpuMemoryMeter::peak_bytes();
  if (s_.device.is_cpu() && limit_bytes > 0 && cpu_peak > limit_bytes)
    throw OutOfMemory(s_.batch, cpu_peak,
                      "batch " + std::to_string(s_.batch) + " needs " +
                          std::to_string(cpu_peak >> 20) +
                          " MiB of tensors, over --memory-limit-mb " +
                          std::to_string(static_cast<int64_t>(s_.o.memory_limit_mb)));
  if (s_.device.is_cuda() && s_.probe() &&
      cuda_peak_allocated_bytes(s_.ordinal) > cuda_usable_bytes(s_.ordinal))
    throw OutOfMemory(s_.batch, cuda_peak_allocated_bytes(s_.ordinal),
                      "within the 10% safety margin of GPU memory");
}

TrainOutcome Trainer::finish() {
  TrainOutcome& out = out_;
  const models::Model& model = *s_.model;
  out.parameters = models::parameter_count(model);
  const models::FlopCount flops = model.flops();
  out.training_flops_per_sample = flops.training_flops;
  out.tokens_per_sample = flops.tokens;
  out.flops_formula = flops.formula;
  out.alt_training_flops_per_sample = flops.alt_training_flops;
  out.alt_flops_formula = flops.alt_formula;
  out.device_name = describe_device(s_.ordinal);
  out.gpu = device_properties(s_.ordinal);
  out.device_index = s_.ordinal;
  if (s_.sync) out.bucket_bytes = s_.sync->layout().bytes;
  if (s_.grad_timer) {
    out.grad_ready_ms = s_.grad_timer->rows();
    out.param_bytes = s_.grad_timer->param_bytes();
  }
  if (s_.profiler) {
    if (s_.reducer) s_.reducer->set_trace(nullptr);
    out.profile = s_.profiler->summary();
  }
  out.data = s_.data->summary();
  if (s_.probe()) return std::move(out);
  auto armed = monitor_->arm("the final parameter averaging and check");
  // A local-SGD run whose last step was not an averaging one ends with one (untimed): the model it
  // leaves is the ranks' mean, as local SGD defines it, and the ranks agree again.
  if (local_sgd_.on() && out.diverged.empty() &&
      !local_sgd_.averages_after(static_cast<int>(out.steps.size()) - 1)) {
    average_parameters(*s_.reducer, s_.world, s_.params, s_.master);
    out.final_average = true;
  }
  faults_.at_end(*s_.model, s_.master);
  if (out.diverged.empty()) out.diverged = divergence_->check(static_cast<int>(out.steps.size()));
  armed.disarm();
  out.param_checksums = divergence_->checksums();
  if (s_.device.is_cuda()) {
    out.memory_source = "CUDA caching allocator peak allocated bytes";
    out.peak_memory_bytes = cuda_peak_allocated_bytes(s_.ordinal);
  } else {
    out.memory_source = "peak bytes of CPU tensors (dtune's counting allocator)";
    out.peak_memory_bytes = CpuMemoryMeter::peak_bytes();
    out.peak_rss_bytes = process_peak_rss_bytes();
  }
  return std::move(out);
}

namespace {

TrainOutcome train_or_probe(const Options& o, const MainArgs& a, int64_t batch, RunMode mode,
                            RunMonitor* monitor) {
  if (o.pipeline.stages > 1 && mode == RunMode::kTrain) return run_pipeline(o, a, batch, *monitor);
  const std::unique_ptr<TrainSetup> setup = TrainSetup::build(o, a.ctx, batch, mode, monitor);
  Trainer trainer(*setup, a.ctx, monitor);
  const int total_steps = setup->o.warmup_steps + setup->o.steps;
  for (int step = 0; step < total_steps; ++step)
    if (!trainer.step(step)) break;
  return trainer.finish();
}

}  // namespace

TrainOutcome run_training(const Options& o, const MainArgs& a, int64_t batch, RunMode mode,
                          RunMonitor* monitor) {
  const std::string at = " at batch " + std::to_string(batch) + " per rank";
  try {
    return train_or_probe(o, a, batch, mode, monitor);
  } catch (const c10::OutOfMemoryError& e) {
    throw OutOfMemory(batch, 0, "CUDA out of memory" + at);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(batch, CpuMemoryMeter::peak_bytes(),
                      "host memory exhausted" + at + " (std::bad_alloc)");
  } catch (const c10::Error& e) {
    // LibTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp): "DefaultCPUAllocator: can't
    // allocate memory: you tried to allocate N bytes. Error code 12 (Cannot allocate memory)".
    const std::string what = e.what_without_backtrace();
    if (what.find("can't allocate memory") == std::string::npos &&
        what.find("out of memory") == std::string::npos)
      throw;
    throw OutOfMemory(batch, CpuMemoryMeter::peak_bytes(),
                      "host memory exhausted" + at + ": " + what.substr(0, what.find('\n')));
  }
}

}  // namespace dtune::train
