// The training loop.
#include "train/trainer.h"

#include <sys/resource.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <cmath>
#include <new>
#include <filesystem>
#include <memory>
#include <optional>

#include "train/cuda_device.h"
#include "train/cuda_memory.h"
#include "train/data.h"
#include "train/grad_sync.h"
#include "train/memory_meter.h"
#include "train/optimizer.h"
#include "train/precision.h"
#include "train/telemetry/profiler.h"
#include "train/reducer.h"
#include "train/run_monitor.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/nvtx.h"
#include "train/telemetry/tensorboard.h"
#include "core/timer.h"
#include "models/registry.h"
#include "models/weights.h"

namespace dtune::train {
namespace {

torch::Device pick_device(const Options& o, const RunContext& ctx, int& ordinal) {
  ordinal = device_ordinal(o, ctx);
  if (ordinal < 0) return torch::kCPU;
  // Before anything touches CUDA: what LibTorch and the runtime create on "the current device"
  // (events, streams, NCCL's and cuBLAS's handles) must land on this rank's GPU, not on GPU 0.
  make_cuda_device_current(ordinal);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ordinal));
}

// Sum of every parameter in fp64: equal on every rank unless they diverged.
double checksum(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  double s = 0;
  for (const auto& p : params) s += p.to(torch::kDouble).sum().item<double>();
  return s;
}

// Collective. Compares the parameter checksums of all ranks after `steps_done` optimizer steps
// (warm-up included); returns "" when they agree, else the message (on every rank). Rank 0 gets
// every rank's checksum in `all`.
std::string check_divergence(const RunContext& ctx, const std::vector<torch::Tensor>& params, int steps_done,
                             std::vector<double>& all) {
  all = gather_doubles(ctx.comm(), {checksum(params)});
  std::string bad;
  if (ctx.is_root()) {
    for (size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0]) bad += (bad.empty() ? "" : ",") + std::to_string(r);
  }
  bad = broadcast_string(ctx.comm(), bad);
  if (bad.empty()) return "";
  return "parameters diverged after step " + std::to_string(steps_done) + " (warm-up included): rank(s) " + bad +
         " differ from rank 0 (checksum over all parameters); the gradient synchronisation is broken";
}

// Local SGD: the mean over ranks of every parameter (of the fp32 master copy with bf16 weights,
// which is then cast back), so that all ranks continue from the same point.
void average_parameters(Reducer& reducer, int world, std::vector<torch::Tensor>& params,
                        std::vector<torch::Tensor>& master) {
  torch::NoGradGuard no_grad;
  for (auto& p : master.empty() ? params : master) {
    reducer.allreduce_sum(p.data());
    p.data().div_(world);
  }
  for (size_t i = 0; i < master.size(); ++i) params[i].copy_(master[i]);
}

int64_t process_peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

int device_ordinal(const Options& o, const RunContext& ctx) {
  if (o.device == DeviceKind::kCpu) return -1;
  const int n = query_device_summary().device_count;
  if (n == 0 || !torch::cuda::is_available())
    throw UsageError("--device cuda: no CUDA device visible to " + ctx.host() + " rank " +
                     std::to_string(ctx.rank()) + "; run on GPU nodes or use --device cpu");
  return ctx.local_rank() % n;
}

TrainOutcome train_or_probe(const Options& o, const MainArgs& a, int64_t batch, RunMode mode, RunMonitor* monitor);

TrainOutcome run_training(const Options& o, const MainArgs& a, int64_t batch, RunMode mode, RunMonitor* monitor) {
  const std::string at = " at batch " + std::to_string(batch) + " per rank";
  try {
    return train_or_probe(o, a, batch, mode, monitor);
  } catch (const c10::OutOfMemoryError& e) {
    throw OutOfMemory(batch, 0, "CUDA out of memory" + at);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(batch, CpuMemoryMeter::peak_bytes(), "host memory exhausted" + at + " (std::bad_alloc)");
  } catch (const c10::Error& e) {
    // LibTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp): "DefaultCPUAllocator: can't
    // allocate memory: you tried to allocate N bytes. Error code 12 (Cannot allocate memory)".
    const std::string what = e.what_without_backtrace();
    if (what.find("can't allocate memory") == std::string::npos && what.find("out of memory") == std::string::npos)
      throw;
    throw OutOfMemory(batch, CpuMemoryMeter::peak_bytes(), "host memory exhausted" + at + ": " + what.substr(0, what.find('\n')));
  }
}

int64_t find_batch(const Options& o, const MainArgs& a, RunMonitor& monitor) {
  auto fits = [&](int64_t b) {
    try {
      run_training(o, a, b, RunMode::kProbe, nullptr);
      return true;
    } catch (const OutOfMemory&) {
      return false;
    }
  };
  constexpr int64_t kMaxBatch = 1 << 16;
  if (!fits(1))
    throw UsageError("--batch auto: even batch 1 does not fit" +
                     std::string(o.device == DeviceKind::kCpu ? " in --memory-limit-mb" : " on the GPU"));
  int64_t lo = 1;  // fits
  while (lo < kMaxBatch && fits(lo * 2)) lo *= 2;
  int64_t hi = lo * 2;  // does not fit (or the cap)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  long long mine = lo, agreed = lo;
  const auto armed = monitor.arm("--batch auto: the ranks' agreement on the batch");
  DTUNE_MPI_CHECK(MPI_Allreduce(&mine, &agreed, 1, MPI_LONG_LONG, MPI_MIN, a.ctx.comm()));
  return agreed;
}

TrainOutcome train_or_probe(const Options& o_in, const MainArgs& a, int64_t batch, RunMode mode, RunMonitor* monitor) {
  const RunContext& ctx = a.ctx;
  Options o = o_in;
  const bool probe = mode == RunMode::kProbe;
  if (probe) {
    o.steps = 2;  // the second step runs with the optimizer state the first one created
    o.warmup_steps = 0;
    o.check_every = 0;
    o.profile_steps = 0;
  }
  torch::set_num_threads(o.threads);
  int ordinal = -1;
  const torch::Device device = pick_device(o, ctx, ordinal);
  set_tf32(o.precision == Precision::kTf32);
  const int world = probe ? 1 : ctx.world_size();
  if (device.is_cuda()) cuda_reset_peak_and_cache(ordinal);
  CpuMemoryMeter::reset_peak();
  const int64_t limit_bytes = static_cast<int64_t>(o.memory_limit_mb * (1 << 20));
  auto check_memory = [&] {
    if (device.is_cpu() && limit_bytes > 0 && CpuMemoryMeter::peak_bytes() > limit_bytes)
      throw OutOfMemory(batch, CpuMemoryMeter::peak_bytes(),
                        "batch " + std::to_string(batch) + " needs " +
                            std::to_string(CpuMemoryMeter::peak_bytes() >> 20) + " MiB of tensors, over "
                            "--memory-limit-mb " + std::to_string(static_cast<int64_t>(o.memory_limit_mb)));
    if (device.is_cuda() && probe && cuda_peak_allocated_bytes(ordinal) > cuda_usable_bytes(ordinal))
      throw OutOfMemory(batch, cuda_peak_allocated_bytes(ordinal), "within the 10% safety margin of GPU memory");
  };

  std::shared_ptr<models::Model> model = models::make_model(o.model, o.model_options);
  TrainOutcome out;
  out.batch = batch;
  out.parameters = models::parameter_count(*model);
  const models::FlopCount flops = model->flops();
  out.training_flops_per_sample = flops.training_flops;
  out.tokens_per_sample = flops.tokens;
  out.flops_formula = flops.formula;
  out.device_name = describe_device(ordinal);
  out.alt_training_flops_per_sample = flops.alt_training_flops;
  out.alt_flops_formula = flops.alt_formula;
  out.gpu = device_properties(ordinal);
  out.device_index = ordinal;
  model->to(device);
  if (o.channels_last) models::to_channels_last(*model);
  if (o.weights_dtype == WeightsDtype::kBf16) model->to(torch::kBFloat16);

  TraceLog trace_log;  // before the reducer: its thread may write here until it is destroyed
  std::unique_ptr<Reducer> reducer;
  RunMonitor::Armed armed;
  if (!probe) {
    armed = monitor->arm("setting up the gradient reducer and broadcasting the initial parameters");
    reducer = o.backend == SyncBackend::kNccl ? make_nccl_reducer(ctx, ordinal, o.timeout_s) : make_mpi_reducer(ctx);
  }
  std::vector<torch::Tensor> params = model->parameters();
  {
    // Parameters and buffers start equal on every rank (rank 0's), as DDP does.
    torch::NoGradGuard no_grad;
    if (world > 1) {
      for (auto& p : params) reducer->broadcast(p.data(), 0);
      for (auto& b : model->buffers()) reducer->broadcast(b, 0);
    }
  }
  armed.disarm();
  // bf16 weights: the optimizer updates an fp32 master copy, which is cast back after each step.
  std::vector<torch::Tensor> master;
  if (o.weights_dtype == WeightsDtype::kBf16)
    for (const auto& p : params) master.push_back(p.detach().to(torch::kFloat).requires_grad_(true));
  auto optimizer = make_fused_optimizer(o.optimizer, master.empty() ? params : master, o.lr);

  std::optional<GradSync> sync;
  torch::Tensor bucket_footprint;  // a probe holds what the real run's buckets will hold
  if (ctx.world_size() > 1 && o.local_sgd_every == 0) {
    if (probe) {
      int64_t bytes = 0;
      for (const auto& p : params) bytes += p.numel() * static_cast<int64_t>(p.element_size());
      bucket_footprint = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kByte).device(device));
    } else {
      sync.emplace(params, *reducer, ctx.world_size(), o);
      out.bucket_bytes = sync->layout().bytes;
    }
  }
  LossScaler scaler(o.precision == Precision::kFp16, device);
  std::unique_ptr<DataSource> data = probe || o.data == "synthetic"
                                         ? make_synthetic_source(*model, batch, o.accum_steps, ctx.rank(), o.seed, device)
                                         : make_loader_source(o, *model, batch, ctx, device);
  std::unique_ptr<PhaseClock> clock = device.is_cuda() ? make_cuda_clock(ordinal) : make_cpu_clock();
  if (!o.timing) clock = make_total_only_clock(std::move(clock));
  std::optional<StepProfiler> profiler;
  if (o.profile_steps > 0) {
    clock = make_traced_clock(std::move(clock), trace_log);
    if (reducer) reducer->set_trace(&trace_log);
    // --batch-sweep: one trace directory per batch, so runs do not overwrite each other's traces.
    const std::string dir = o.batch_sweep ? (std::filesystem::path(o.profile_dir) / ("b" + std::to_string(batch))).string()
                                          : o.profile_dir;
    profiler.emplace(o, ctx, device, trace_log, dir);
  }
  model->train();

  std::optional<TensorBoardWriter> tb;
  if (!probe && !o.tensorboard_dir.empty())
    tb.emplace((std::filesystem::path(o.tensorboard_dir) / ("rank" + std::to_string(ctx.rank()))).string(),
               "--tensorboard");
  const double global_batch = static_cast<double>(batch) * ctx.world_size() * o.accum_steps;
  const int total_steps = o.warmup_steps + o.steps;
  // Local SGD averages after every H-th optimizer step, warm-up steps included (the averaging is
  // part of training, not of the measurement); only then are the ranks' parameters meant to be
  // equal, so only then may the divergence guard compare them.
  const bool local_sgd = o.local_sgd_every > 0 && world > 1;
  auto averages_after = [&](int step) { return local_sgd && (step + 1) % o.local_sgd_every == 0; };
  auto equal_after = [&](int step) { return !local_sgd || averages_after(step); };
  std::vector<double> checksums;
  if (monitor) monitor->begin_run(batch);
  for (int step = 0; step < total_steps; ++step) {
    // The whole step, its communication included, within --timeout.
    if (monitor) armed = monitor->arm("training step " + std::to_string(step) + " (batch " + std::to_string(batch) + ")");
    if (profiler) profiler->begin_step(step);
    StepRecord rec;
    rec.profiled = profiler && profiler->in_window(step);
    rec.loss_scale = scaler.current();
    clock->begin_step();
    optimizer->zero_grad();
    for (auto& p : params) p.mutable_grad() = torch::Tensor();  // (the model's, with bf16 weights)
    clock->mark(Phase::kOptimizer);  // freeing last step's gradients is optimizer bookkeeping
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
    for (int m = 0; m < o.accum_steps; ++m) {
      Batch b = data->next(m);
      clock->mark(Phase::kData);
      // Pinned host batches copy asynchronously; synthetic batches are on the device already.
      b.input = b.input.to(device, /*non_blocking=*/true);
      b.target = b.target.to(device, /*non_blocking=*/true);
      torch::Tensor input = o.channels_last ? b.input.contiguous(at::MemoryFormat::ChannelsLast) : b.input;
      clock->mark(Phase::kH2D);
      torch::Tensor loss;
      {
        NvtxRange range("forward");
        AutocastGuard autocast(o.precision, device.type());
        loss = model->loss(model->forward(input), b.target);
      }
      loss_sum += loss.detach().to(torch::kFloat);
      clock->mark(Phase::kForward);
      if (sync) sync->prepare(m == o.accum_steps - 1);
      torch::Tensor objective = scaler.scale(loss / o.accum_steps);
      // Test only: an overflow on one rank, as fp16 produces it, must make every rank skip.
      if (step == o.plant_inf_step && ctx.rank() == o.plant_inf_rank) objective = objective * INFINITY;
      {
        NvtxRange range("backward");
        objective.backward();
      }
      clock->mark(Phase::kBackward);
    }
    if (sync) {
      NvtxRange range("exposed communication");
      sync->finish(deadline_after_s(o.timeout_s));
    }
    clock->mark(Phase::kComm);
    // Loss scaling: unscale, and skip the step on every rank if any gradient is inf/NaN.
    std::vector<torch::Tensor> grads;
    for (auto& p : params)
      if (p.grad().defined()) grads.push_back(p.grad());
    if (scaler.enabled()) {
      torch::Tensor found_inf = scaler.unscale(grads);
      if (reducer) reducer->allreduce_max(found_inf);
      rec.skipped = found_inf.item<float>() != 0.0f;
      scaler.update(found_inf);
    }
    clock->mark(Phase::kScaler);
    if (!rec.skipped) {
      NvtxRange range("optimizer");
      if (!master.empty()) {
        for (size_t i = 0; i < params.size(); ++i) master[i].mutable_grad() = params[i].grad().to(torch::kFloat);
        optimizer->step();
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(master[i]);
      } else {
        optimizer->step();
      }
    }
    clock->mark(Phase::kOptimizer);
    // Local SGD: ranks step on their own gradients; every H steps, after the step, the
    // parameters are averaged (timed as communication).
    if (averages_after(step)) average_parameters(*reducer, world, params, master);
    if (o.local_sgd_every > 0) clock->mark(Phase::kComm);
    if (step == 0 && ctx.rank() == o.perturb_rank) {
      torch::NoGradGuard no_grad;
      params.front().add_(1e-3);
    }
    rec.phases = clock->end_step(rec.total_ms);
    check_memory();
    rec.loss = loss_sum.item<double>() / o.accum_steps;
    out.steps.push_back(rec);
    if (tb) {
      tb->scalar("loss", step, static_cast<float>(rec.loss));
      tb->scalar("step_time_ms", step, static_cast<float>(rec.total_ms));
      tb->scalar("samples_per_s", step, static_cast<float>(global_batch / (rec.total_ms / 1e3)));
      if (scaler.enabled()) tb->scalar("loss_scale", step, static_cast<float>(rec.loss_scale));
      for (size_t ph = 0; ph < kPhases; ++ph)
        tb->scalar(std::string("phase/") + kPhaseNames[ph], step, static_cast<float>(rec.phases[ph]));
      tb->flush();
    }
    if (!probe && o.check_every > 0 && (step + 1) % o.check_every == 0 && equal_after(step))
      out.diverged = check_divergence(ctx, params, step + 1, checksums);
    if (profiler) profiler->end_step(step);
    if (monitor) {
      out.interrupted = monitor->exchange(rec);
      armed.disarm();
      monitor->record(rec);
    }
    if (!out.diverged.empty() || out.interrupted) break;  // on every rank: the verdict was shared
  }
  if (profiler) {
    if (reducer) reducer->set_trace(nullptr);
    out.profile = profiler->summary();
  }
  out.data = data->summary();
  if (probe) return out;
  armed = monitor->arm("the final parameter averaging and check");
  // A local-SGD run whose last step was not an averaging one ends with one (untimed): the model it
  // leaves is the ranks' mean, as local SGD defines it, and the ranks agree again.
  if (local_sgd && out.diverged.empty() && !averages_after(static_cast<int>(out.steps.size()) - 1)) {
    average_parameters(*reducer, world, params, master);
    out.final_average = true;
  }
  if (!o.dump_path.empty() && ctx.is_root()) {
    models::TensorMap dump;
    for (const auto& p : model->named_parameters()) {
      dump["param." + p.key()] = p.value().detach().to(torch::kCPU).contiguous();
      if (p.value().grad().defined()) dump["grad." + p.key()] = p.value().grad().to(torch::kCPU).contiguous();
    }
    models::write_tensors(o.dump_path, dump);
  }
  if (out.diverged.empty())
    out.diverged = check_divergence(ctx, params, static_cast<int>(out.steps.size()), checksums);
  armed.disarm();
  out.param_checksums = checksums;
  if (device.is_cuda()) {
    out.memory_source = "CUDA caching allocator peak allocated bytes";
    out.peak_memory_bytes = cuda_peak_allocated_bytes(ordinal);
  } else {
    out.memory_source = "peak bytes of CPU tensors (dtune's counting allocator)";
    out.peak_memory_bytes = CpuMemoryMeter::peak_bytes();
    out.peak_rss_bytes = process_peak_rss_bytes();
  }
  return out;
}

}  // namespace dtune::train
