// Building a training run's parts.
#include "train/setup.h"

#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/utils.h>

#include <cstdio>
#include <filesystem>

#include "core/device_info.h"
#include "core/error.h"
#include "core/progress.h"
#include "models/model_size.h"
#include "models/registry.h"
#include "train/cuda_device.h"
#include "train/cuda_memory.h"
#include "train/memory_meter.h"
#include "train/run_monitor.h"

namespace dtune::train {
namespace {

constexpr int64_t kLargeModelParameters = 100'000'000;  // builds take seconds from here on

torch::Device pick_device(const Options& o, const RunContext& ctx, int& ordinal) {
  ordinal = device_ordinal(o, ctx);
  if (ordinal < 0) return torch::kCPU;
  // Before anything touches CUDA: what LibTorch and the runtime create on "the current device"
  // (events, streams, NCCL's and cuBLAS's handles) must land on this rank's GPU, not on GPU 0.
  make_cuda_device_current(ordinal);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ordinal));
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

std::unique_ptr<TrainSetup> TrainSetup::build(const Options& o_in, const RunContext& ctx,
                                              int64_t batch, RunMode mode, RunMonitor* monitor) {
  std::unique_ptr<TrainSetup> s(new TrainSetup());
  s->o = o_in;
  s->mode = mode;
  s->batch = batch;
  Options& o = s->o;
  const bool probe = s->probe();
  if (probe) {
    o.steps = 2;  // the second step runs with the optimizer state the first one created
    o.warmup_steps = 0;
    o.check_every = 0;
    o.profile_steps = 0;
  }
  torch::set_num_threads(o.threads);
  s->device = pick_device(o, ctx, s->ordinal);
  set_tf32(o.precision == Precision::kTf32);
  s->world = probe ? 1 : ctx.world_size();
  if (s->device.is_cuda()) cuda_reset_peak_and_cache(s->ordinal);
  CpuMemoryMeter::reset_peak();

  {
    // Building a large model takes a while (GPT-2 d48: 1.56 billion parameters, 6 GB): rank 0
    // says so first (core/progress.h: on a terminal, or with DTUNE_PROGRESS=1), and how long it
    // took.
    const int64_t params = models::model_size(o.model, o.model_options).parameters;
    const bool large = params >= kLargeModelParameters && ctx.is_root() && !probe;
    Progress progress("dtune-train", "", 0, large ? ProgressMode::kAuto : ProgressMode::kNever);
    progress.say("building " + o.model + " (" + std::to_string(params / 1000000) + "M parameters)");
    s->model = models::make_model(o.model, o.model_options);
    char took[32];
    std::snprintf(took, sizeof took, "%.1f", progress.elapsed_s());
    progress.say("built " + o.model + " in " + took + " s");
  }
  auto& model = *s->model;
  model.to(s->device);
  if (o.channels_last) models::to_channels_last(model);
  if (o.weights_dtype == WeightsDtype::kBf16) model.to(torch::kBFloat16);

  RunMonitor::Armed armed;
  if (!probe) {
    armed = monitor->arm("setting up the gradient reducer and broadcasting the initial parameters");
    s->reducer = o.backend == SyncBackend::kNccl ? make_nccl_reducer(ctx, s->ordinal, o.timeout_s)
                                                 : make_mpi_reducer(ctx, o.reduce_algo);
  }
  s->params = model.parameters();
  {
    // Parameters and buffers start equal on every rank (rank 0's), as DDP does.
    torch::NoGradGuard no_grad;
    if (s->world > 1) {
      for (auto& p : s->params) s->reducer->broadcast(p.data(), 0);
      for (auto& b : model.buffers()) s->reducer->broadcast(b, 0);
    }
  }
  armed.disarm();
  // bf16 weights: the optimizer updates an fp32 master copy, which is cast back after each step.
  if (o.weights_dtype == WeightsDtype::kBf16) s->master = make_master_copy(s->params);
  s->optimizer = make_fused_optimizer(o.optimizer, s->master.empty() ? s->params : s->master, o.lr);

  if (ctx.world_size() > 1 && o.local_sgd_every == 0) {
    if (probe) {
      int64_t bytes = 0;
      for (const auto& p : s->params) bytes += p.numel() * static_cast<int64_t>(p.element_size());
      s->bucket_footprint =
          torch::empty({bytes}, torch::TensorOptions().dtype(torch::kByte).device(s->device));
    } else {
      s->sync.emplace(s->params, *s->reducer, ctx.world_size(), o);
    }
  }
  // After GradSync, so that its hooks run first (the times include the copy into the bucket).
  if (!probe) s->grad_timer.emplace(s->params, s->device.is_cuda() ? s->ordinal : -1);
  s->scaler.emplace(o.precision == Precision::kFp16, s->device);
  s->data = probe || o.data == "synthetic"
                ? make_synthetic_source(model, batch, o.accum_steps, ctx.rank(), o.seed, s->device)
                : make_loader_source(o, model, batch, ctx.rank(), ctx.world_size(), s->device);
  s->clock = make_phase_clock(make_timeline(s->device.is_cuda() ? s->ordinal : -1));
  if (!o.timing) s->clock = make_total_only_clock(std::move(s->clock));
  if (o.profile_steps > 0) {
    s->clock = make_traced_clock(std::move(s->clock), s->trace_log);
    if (s->reducer) s->reducer->set_trace(&s->trace_log);
    // --batch-sweep: one trace directory per batch, so runs do not overwrite each other's traces.
    const std::string dir =
        o.batch_sweep
            ? (std::filesystem::path(o.profile_dir) / ("b" + std::to_string(batch))).string()
            : o.profile_dir;
    s->profiler.emplace(o, ctx, s->device, s->trace_log, dir);
  }
  model.train();
  return s;
}

}  // namespace dtune::train
