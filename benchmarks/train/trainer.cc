// The training loop.
#include "benchmarks/train/trainer.h"

#include <sys/resource.h>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cmath>
#include <memory>
#include <optional>

#include "benchmarks/train/cuda_memory.h"
#include "benchmarks/train/data.h"
#include "benchmarks/train/grad_sync.h"
#include "benchmarks/train/precision.h"
#include "benchmarks/train/reducer.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/timer.h"
#include "models/registry.h"
#include "models/weights.h"

namespace dtune::train {
namespace {

torch::Device pick_device(const Options& o, const RunContext& ctx, int& ordinal) {
  ordinal = -1;
  if (o.device == DeviceKind::kCpu) return torch::kCPU;
  const int n = query_device_summary().device_count;
  if (n == 0 || !torch::cuda::is_available())
    throw UsageError("--device cuda: no CUDA device visible to " + ctx.host() + " rank " +
                     std::to_string(ctx.rank()) + "; run on GPU nodes or use --device cpu");
  ordinal = ctx.local_rank() % n;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ordinal));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Options& o, std::vector<torch::Tensor> params) {
  if (o.optimizer == OptimizerKind::kAdamw)
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(0.01));
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr).momentum(0.9));
}

// Sum of every parameter in fp64: equal on every rank unless they diverged.
double checksum(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  double s = 0;
  for (const auto& p : params) s += p.to(torch::kDouble).sum().item<double>();
  return s;
}

void check_divergence(const RunContext& ctx, const std::vector<torch::Tensor>& params, int step,
                      std::vector<double>* out) {
  const std::vector<double> all = gather_doubles(ctx.comm(), {checksum(params)});
  std::string bad;
  if (ctx.is_root()) {
    for (size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0]) bad += (bad.empty() ? "" : ",") + std::to_string(r);
  }
  bad = broadcast_string(ctx.comm(), bad);
  if (!bad.empty())
    throw Error("parameters diverged at step " + std::to_string(step) + ": rank(s) " + bad +
                " differ from rank 0 (checksum over all parameters); the gradient "
                "synchronisation is broken");
  if (out) *out = all;
}

int64_t process_peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

TrainOutcome run_training(const Options& o, const MainArgs& a, int64_t batch) {
  const RunContext& ctx = a.ctx;
  torch::set_num_threads(o.threads);
  int ordinal = -1;
  const torch::Device device = pick_device(o, ctx, ordinal);
  set_tf32(o.precision == Precision::kTf32);

  std::shared_ptr<models::Model> model = models::make_model(o.model, o.model_options);
  TrainOutcome out;
  out.batch = batch;
  out.parameters = models::parameter_count(*model);
  const models::FlopCount flops = model->flops();
  out.training_flops_per_sample = flops.training_flops;
  out.tokens_per_sample = flops.tokens;
  out.flops_formula = flops.formula;
  out.device_name = describe_device(ordinal);
  model->to(device);
  if (o.channels_last) models::to_channels_last(*model);
  if (o.weights_dtype == WeightsDtype::kBf16) model->to(torch::kBFloat16);

  std::unique_ptr<Reducer> reducer =
      o.backend == SyncBackend::kNccl ? make_nccl_reducer(ctx, ordinal) : make_mpi_reducer(ctx);
  std::vector<torch::Tensor> params = model->parameters();
  {
    // Parameters and buffers start equal on every rank (rank 0's), as DDP does.
    torch::NoGradGuard no_grad;
    if (ctx.world_size() > 1) {
      for (auto& p : params) reducer->broadcast(p.data(), 0);
      for (auto& b : model->buffers()) reducer->broadcast(b, 0);
    }
  }
  // bf16 weights: the optimizer updates an fp32 master copy, which is cast back after each step.
  std::vector<torch::Tensor> master;
  if (o.weights_dtype == WeightsDtype::kBf16)
    for (const auto& p : params) master.push_back(p.detach().to(torch::kFloat).requires_grad_(true));
  auto optimizer = make_optimizer(o, master.empty() ? params : master);

  std::optional<GradSync> sync;
  if (ctx.world_size() > 1 && o.local_sgd_every == 0) {
    sync.emplace(params, *reducer, ctx.world_size(), o);
    out.bucket_bytes = sync->layout().bytes;
  }
  LossScaler scaler(o.precision == Precision::kFp16, device);
  auto data = make_synthetic_source(*model, batch, o.accum_steps, ctx.rank(), o.seed, device);
  auto clock = device.is_cuda() ? make_cuda_clock() : make_cpu_clock();
  model->train();

  const int total_steps = o.warmup_steps + o.steps;
  for (int step = 0; step < total_steps; ++step) {
    StepRecord rec;
    rec.loss_scale = scaler.current();
    clock->begin_step();
    optimizer->zero_grad(true);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(device));
    for (int m = 0; m < o.accum_steps; ++m) {
      Batch b = data->next(m);
      clock->mark(Phase::kData);
      torch::Tensor input = o.channels_last ? b.input.contiguous(at::MemoryFormat::ChannelsLast) : b.input;
      clock->mark(Phase::kH2D);
      torch::Tensor loss;
      {
        AutocastGuard autocast(o.precision, device.type());
        loss = model->loss(model->forward(input), b.target);
      }
      loss_sum += loss.detach().to(torch::kFloat);
      clock->mark(Phase::kForward);
      if (sync) sync->prepare(m == o.accum_steps - 1);
      torch::Tensor objective = scaler.scale(loss / o.accum_steps);
      // Test only: an overflow on one rank, as fp16 produces it, must make every rank skip.
      if (step == o.plant_inf_step && ctx.rank() == o.plant_inf_rank) objective = objective * INFINITY;
      objective.backward();
      clock->mark(Phase::kBackward);
    }
    if (sync) sync->finish(deadline_after_s(o.timeout_s));
    if (o.local_sgd_every > 0 && ctx.world_size() > 1 && (step + 1) % o.local_sgd_every == 0) {
      // Local SGD: ranks step on their own gradients; every H steps the parameters are averaged.
      torch::NoGradGuard no_grad;
      for (auto& p : params) {
        reducer->allreduce_sum(p.data());
        p.data().div_(ctx.world_size());
      }
    }
    clock->mark(Phase::kComm);
    // Loss scaling: unscale, and skip the step on every rank if any gradient is inf/NaN.
    std::vector<torch::Tensor> grads;
    for (auto& p : params)
      if (p.grad().defined()) grads.push_back(p.grad());
    if (scaler.enabled()) {
      torch::Tensor found_inf = scaler.unscale(grads);
      reducer->allreduce_max(found_inf);
      rec.skipped = found_inf.item<float>() != 0.0f;
      scaler.update(found_inf);
    }
    clock->mark(Phase::kScaler);
    if (!rec.skipped) {
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
    rec.phases = clock->end_step(rec.total_ms);
    rec.loss = loss_sum.item<double>() / o.accum_steps;
    out.steps.push_back(rec);
    if (o.check_every > 0 && (step + 1) % o.check_every == 0 && o.local_sgd_every == 0)
      check_divergence(ctx, params, step, nullptr);
  }
  if (!o.dump_path.empty() && ctx.is_root()) {
    models::TensorMap dump;
    for (const auto& p : model->named_parameters()) {
      dump["param." + p.key()] = p.value().detach().to(torch::kCPU).contiguous();
      if (p.value().grad().defined()) dump["grad." + p.key()] = p.value().grad().to(torch::kCPU).contiguous();
    }
    models::write_tensors(o.dump_path, dump);
  }
  if (o.local_sgd_every == 0 || o.steps % o.local_sgd_every == 0)
    check_divergence(ctx, params, total_steps, &out.param_checksums);
  if (device.is_cuda()) {
    out.memory_source = "CUDA caching allocator peak allocated bytes";
    out.peak_memory_bytes = cuda_peak_allocated_bytes(ordinal);
  } else {
    out.memory_source = "process peak RSS (getrusage ru_maxrss)";
    out.peak_memory_bytes = process_peak_rss_bytes();
  }
  return out;
}

}  // namespace dtune::train
