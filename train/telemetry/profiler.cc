// The Kineto profiler around a window of training steps (see profiler.h).
#include "train/telemetry/profiler.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace dtune::train {
namespace {

namespace prof = torch::profiler::impl;

prof::ProfilerConfig profiler_config() {
  // Like torch.profiler.profile() with its defaults: no shapes, memory, stacks or FLOPs, which
  // keep the overhead down.
  return prof::ProfilerConfig(prof::ProfilerState::KINETO);
}

std::set<prof::ActivityType> activities(bool cuda) {
  std::set<prof::ActivityType> a{prof::ActivityType::CPU};
  if (cuda) a.insert(prof::ActivityType::CUDA);
  return a;
}

}  // namespace

StepProfiler::StepProfiler(const Options& o, const RunContext& ctx, torch::Device device,
                           TraceLog& log, const std::string& trace_dir)
    : first_(o.profile_first),
      count_(o.profile_steps),
      ctx_(ctx),
      cuda_(device.is_cuda()),
      backend_(to_string(o.backend)),
      trace_dir_(trace_dir),
      log_(log) {
  if (count_ == 0) return;
  run_meta_ = {
      {"model", o.model}, {"precision", to_string(o.precision)}, {"command_line", o.command_line}};
  std::error_code ec;
  std::filesystem::create_directories(trace_dir_, ec);
  if (ec)
    throw UsageError("--profile-dir " + trace_dir_ + ": cannot create it (" + ec.message() + ")");
  // Without a GPU Kineto logs "gpuGetDeviceCount failed" as an ERROR on every rank; quieten it on
  // CPU runs unless the user set a level.
  if (!cuda_) setenv("KINETO_LOG_LEVEL", "5", 0);
  // Kineto's one-time set-up happens here, before the window, so it is not in the profiled steps.
  torch::autograd::profiler::prepareProfiler(profiler_config(), activities(cuda_));
}

StepProfiler::~StepProfiler() {
  if (step_range_ || log_.enabled()) {
    // The run ended inside the window (an exception): stop the profiler, keep nothing.
    step_range_.reset();
    log_.set_enabled(false);
    try {
      torch::autograd::profiler::disableProfiler();
    } catch (...) {
    }
  }
}

void StepProfiler::open(int step) {
  if (step == first_) {
    torch::autograd::profiler::enableProfiler(profiler_config(), activities(cuda_));
    log_.take();  // nothing from before the window
    log_.set_enabled(true);
    window_start_ = std::chrono::steady_clock::now();
  }
  std::string name = "ProfilerStep#" + std::to_string(step);
  step_range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  StepAnchor& a = anchors_[step];
  a.before = std::chrono::steady_clock::now();
  if (step_range_->isActive()) step_range_->before(std::move(name));
  a.after = std::chrono::steady_clock::now();
}

void StepProfiler::close(int step) {
  step_range_.reset();  // ends the ProfilerStep#N range
  if (step == first_ + count_ - 1) finish();
}

void StepProfiler::finish() {
  const auto window_end = std::chrono::steady_clock::now();
  log_.set_enabled(false);
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result =
      torch::autograd::profiler::disableProfiler();
  const auto t0 = std::chrono::steady_clock::now();

  std::vector<ProfiledEvent> events;
  for (const auto& e : result->events()) {
    if (e.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE))
      continue;  // annotations, not ops
    ProfiledEvent p;
    p.name = e.name();
    p.thread = e.startThreadId();
    p.start_ns = static_cast<int64_t>(e.startNs());
    p.end_ns = static_cast<int64_t>(e.endNs());
    p.on_device = e.deviceType() != c10::DeviceType::CPU;
    p.correlation = e.correlationId();
    p.linked_correlation = e.linkedCorrelationId();
    events.push_back(std::move(p));
  }
  summary_.ran = true;
  summary_.first_step = first_;
  summary_.steps = count_;
  summary_.device = cuda_;
  summary_.window_us =
      std::chrono::duration<double, std::micro>(window_end - window_start_).count();
  summary_.table = build_op_table(events, cuda_ ? OpSort::kSelfDevice : OpSort::kSelfCpu);

  summary_.trace_path = (std::filesystem::path(trace_dir_) /
                         ("rank" + std::to_string(ctx_.rank()) + ".pt.trace.json"))
                            .string();
  result->save(summary_.trace_path);
  TraceRankInfo info{ctx_.rank(), ctx_.world_size(), backend_, run_meta_, pipeline_stage_};
  info.extra["host"] = ctx_.host();
  info.extra["profile_steps"] = std::to_string(first_) + ":" + std::to_string(count_);
  finish_chrome_trace(summary_.trace_path, info, log_.take(), anchors_);
  summary_.finish_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dtune::train
