// The training loop.
#include "train/trainer.h"

#include <sys/resource.h>
#include <torch/torch.h>

#include <new>
#include <string>

#include "core/error.h"
#include "models/model_size.h"
#include "models/registry.h"
#include "train/cuda_memory.h"
#include "train/memory_meter.h"
#include "train/mesh.h"
#include "train/observers.h"
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
      strategy_(*setup.strategy),
      faults_(setup.o, ctx.rank()) {
  const Options& o = s_.o;
  out_.batch = s_.batch;
  if (!s_.probe() && s_.mesh->degree(MeshAxis::kTp) > 1 && s_.mesh->degree(MeshAxis::kPp) == 1)
    faults_.dump_tp_slices(s_.mesh->coord(MeshAxis::kDp) == 0, s_.mesh->coord(MeshAxis::kTp));
  // Added outermost first: begin_step runs in this order, end_step in the reverse one.
  if (monitor_)
    observers_.push_back(std::make_unique<MonitorObserver>(*monitor_, s_.batch, strategy_));
  if (auto mode = strategy_.observer()) observers_.push_back(std::move(mode));
  if (s_.profiler) observers_.push_back(std::make_unique<ProfilerObserver>(*s_.profiler));
  if (!s_.probe() && !o.tensorboard_dir.empty())
    observers_.push_back(std::make_unique<TensorBoardObserver>(
        o.tensorboard_dir, ctx_.rank(), strategy_.global_batch(), s_.scaler->enabled()));
  if (strategy_.replicated()) {
    const bool tp = s_.mesh->degree(MeshAxis::kTp) > 1;
    auto guard = std::make_unique<DivergenceGuard>(
        ctx_, s_.params, s_.probe() ? 0 : o.check_every, s_.local_sgd,
        tp ? s_.mesh->comm(MeshAxis::kTp) : MPI_COMM_NULL);
    divergence_ = guard.get();
    observers_.push_back(std::move(guard));
  }
}

bool Trainer::step(int step) {
  StepRecord rec;
  for (auto& obs : observers_) obs->begin_step(step, rec);
  rec.loss_scale = s_.scaler->current();
  strategy_.run_step(step, rec, faults_);
  if (const auto& tp = s_.o.model_options.tp) {  // tensor parallelism's collectives this step
    const models::TpGroup::Traffic t = tp->take_traffic();
    if (step >= s_.o.warmup_steps) {
      tp_traffic_.add(t);
      ++tp_steps_;
    }
  }
  faults_.after_step(step, s_.params);
  check_memory();
  out_.steps.push_back(rec);
  for (auto it = observers_.rbegin(); it != observers_.rend(); ++it)
    (*it)->end_step(step, rec, out_);
  return out_.diverged.empty() && !out_.interrupted;  // on every rank: the verdict was shared
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
  // Split over a tensor-parallel group, the model is still one model: its count, not this rank's.
  out.parameters = s_.o.model_options.tp
                       ? models::model_size(s_.o.model, s_.o.model_options).parameters
                       : models::parameter_count(model);
  const models::FlopCount flops = model.flops();
  out.training_flops_per_sample = flops.training_flops;
  out.tokens_per_sample = flops.tokens;
  out.flops_formula = flops.formula;
  out.alt_training_flops_per_sample = flops.alt_training_flops;
  out.alt_flops_formula = flops.alt_formula;
  out.device_name = describe_device(s_.ordinal);
  if (tp_steps_ > 0) {
    out.tp_comm_bytes_per_step = tp_traffic_.bytes / tp_steps_;
    out.tp_comm_ms_per_step = 1e3 * tp_traffic_.seconds / tp_steps_;
    // Every site of the model, whether or not this rank's stage holds it (the embedding, each
    // block, the head): the same length on every rank.
    const size_t sites =
        static_cast<size_t>(models::model_size(s_.o.model, s_.o.model_options).shape.layers + 2);
    out.tp_comm_bytes_by_layer.assign(sites, 0);
    out.tp_comm_ms_by_layer.assign(sites, 0.0);
    for (size_t i = 0; i < tp_traffic_.site_bytes.size() && i < sites; ++i) {
      out.tp_comm_bytes_by_layer[i] = tp_traffic_.site_bytes[i] / tp_steps_;
      out.tp_comm_ms_by_layer[i] = 1e3 * tp_traffic_.site_seconds[i] / tp_steps_;
    }
  }
  out.gpu = device_properties(s_.ordinal);
  out.device_index = s_.ordinal;
  strategy_.finish(out);
  if (s_.profiler) {
    if (s_.reducer) s_.reducer->set_trace(nullptr);
    out.profile = s_.profiler->summary();
  }
  if (s_.probe() || !strategy_.replicated()) return std::move(out);
  auto armed = monitor_->arm("the final parameter averaging and check");
  // A local-SGD run whose last step was not an averaging one ends with one (untimed): the model it
  // leaves is the ranks' mean, as local SGD defines it, and the ranks agree again.
  if (s_.local_sgd.on() && out.diverged.empty() &&
      !s_.local_sgd.averages_after(static_cast<int>(out.steps.size()) - 1)) {
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
    out.peak_reserved_bytes = cuda_peak_reserved_bytes(s_.ordinal);
  } else {
    out.memory_source = "peak bytes of CPU tensors (dtune's counting allocator)";
    out.peak_memory_bytes = CpuMemoryMeter::peak_bytes();
    out.peak_reserved_bytes = out.peak_memory_bytes;
    out.peak_rss_bytes = process_peak_rss_bytes();
  }
  return std::move(out);
}

namespace {

TrainOutcome train_or_probe(const Options& o, const MainArgs& a, int64_t batch, RunMode mode,
                            RunMonitor* monitor) {
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
