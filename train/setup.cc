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
#include "core/torch_cuda.h"
#include "models/model_size.h"
#include "models/registry.h"
#include "train/cuda_device.h"
#include "train/cuda_memory.h"
#include "train/data_parallel_step.h"
#include "train/memory_meter.h"
#include "train/pipeline/pipeline_step.h"
#include "train/run_monitor.h"
#include "train/tp_group.h"

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

void build_shared_parts(TrainSetup& s, const RunContext& ctx, RunMonitor* monitor) {
  const Options& o = s.o;
  const DeviceMesh& mesh = *s.mesh;
  const int dp = mesh.degree(MeshAxis::kDp), dp_rank = mesh.coord(MeshAxis::kDp);
  if (!s.probe()) {
    RunMonitor::Armed armed =
        monitor->arm("setting up the gradient reducer and broadcasting the initial parameters");
    // NCCL for the data axis unless it is one rank of a pipeline (then there is nothing to reduce).
    const bool nccl =
        o.backend == SyncBackend::kNccl && (mesh.degree(MeshAxis::kPp) == 1 || dp > 1);
    s.reducer = nccl ? make_nccl_reducer(mesh.comm(MeshAxis::kDp), s.ordinal, o.timeout_s)
                     : make_mpi_reducer(ctx, mesh.comm(MeshAxis::kDp), o.reduce_algo);
    torch::NoGradGuard no_grad;
    if (dp > 1) {
      for (auto& p : s.params) s.reducer->broadcast(p.data(), 0);
      for (auto& b : s.model->buffers()) s.reducer->broadcast(b, 0);
    }
  }
  s.sharding = build_param_sharding(s, dp, dp_rank, !s.probe() && dp > 1 && o.local_sgd_every == 0);
  s.scaler.emplace(o.precision == Precision::kFp16, s.device);
  if (s.probe() || o.data == "synthetic")
    s.data = make_synthetic_source(*s.model, s.batch, o.accum_steps, dp_rank, o.seed, s.device);
  else if (mesh.coord(MeshAxis::kPp) == 0)
    s.data = make_loader_source(o, *s.model, s.batch, dp_rank, dp, s.device);
  if (o.profile_steps > 0) {
    // --batch-sweep: one trace directory per batch, so runs do not overwrite each other's traces.
    const std::string dir =
        o.batch_sweep
            ? (std::filesystem::path(o.profile_dir) / ("b" + std::to_string(s.batch))).string()
            : o.profile_dir;
    s.profiler.emplace(o, ctx, s.device, s.trace_log, dir);
    if (mesh.degree(MeshAxis::kPp) > 1) s.profiler->set_pipeline_stage(mesh.coord(MeshAxis::kPp));
  }
}

int device_ordinal(const Options& o, const RunContext& ctx) {
  if (o.device == DeviceKind::kCpu) return -1;
  const int n = query_device_summary().device_count;
  if (n == 0 || !torch::cuda::is_available())
    throw UsageError("--device cuda: no CUDA device visible to " + ctx.host() + " rank " +
                     std::to_string(ctx.rank()) +
                     (torch_cuda_load_error().empty() ? std::string()
                                                      : " (LibTorch's CUDA library did not load: " +
                                                            torch_cuda_load_error() + ")") +
                     "; run on GPU nodes or use --device cpu");
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
  s->mesh = probe ? std::make_unique<DeviceMesh>(MPI_COMM_SELF, 0, MeshShape{})
                  : std::make_unique<DeviceMesh>(
                        ctx.comm(), ctx.rank(),
                        make_mesh_shape(ctx.world_size(), o.tp, o.pipeline.stages, o.mesh_order));
  if (s->device.is_cuda()) cuda_reset_peak_and_cache(s->ordinal);
  CpuMemoryMeter::reset_peak();
  if (s->mesh->degree(MeshAxis::kTp) > 1)  // the model splits its layers over the tp axis
    o.model_options.tp = make_mpi_tp_group(s->mesh->comm(MeshAxis::kTp));
  else if (probe && o.tp > 1)  // --batch auto: one tp rank's share, probed alone
    o.model_options.tp = make_probe_tp_group(o.tp);

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

  model.train();

  s->local_sgd = LocalSgdSchedule(o.local_sgd_every, s->world);
  s->strategy = o.pipeline.stages > 1 && !probe ? build_pipeline(*s, ctx, *monitor)
                                                : build_data_parallel(*s, ctx, monitor);
  return s;
}

}  // namespace dtune::train
