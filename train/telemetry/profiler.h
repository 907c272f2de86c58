// --profile-steps START:COUNT: the LibTorch (Kineto) profiler around a window of whole training
// steps on every rank, as torch.profiler.profile(schedule=...) does in Python. Each profiled step
// is wrapped in a ProfilerStep#N annotation (the name Holistic Trace Analysis and TensorBoard's
// profiler plugin look for); dtune's phase and gradient-reduction spans are recorded meanwhile
// (trace_log.h). When the window closes: the operator table (op_table.h) and the per-rank
// Chrome trace DIR/rank<r>.pt.trace.json, finished with rank metadata (chrome_trace.h).
// Outside the window begin_step/end_step are an integer comparison.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "train/config.h"
#include "train/telemetry/chrome_trace.h"
#include "train/telemetry/profile_results.h"
#include "train/telemetry/trace_log.h"

namespace at {
class RecordFunction;
}

namespace dtune::train {

class StepProfiler {
 public:
  // Off (no profiler touched) when o.profile_steps == 0. `run_label` names the trace's run.
  StepProfiler(const Options& o, const RunContext& ctx, torch::Device device, TraceLog& log,
               const std::string& trace_dir);
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  ~StepProfiler();

  bool in_window(int step) const { return count_ > 0 && step >= first_ && step < first_ + count_; }
  // Around the whole of each step (first and last statements of the loop body).
  void begin_step(int step) {
    if (in_window(step)) open(step);
  }
  void end_step(int step) {
    if (in_window(step)) close(step);
  }
  const ProfileSummary& summary() const { return summary_; }
  // A pipeline stage's trace gains the row "pipeline stage `stage`" (TraceTrack::kPipeline).
  void set_pipeline_stage(int stage) { pipeline_stage_ = stage; }

 private:
  void open(int step);
  void close(int step);
  void finish();

  int first_ = 0, count_ = 0;
  int pipeline_stage_ = -1;
  const RunContext& ctx_;
  bool cuda_;
  std::string backend_, trace_dir_;
  std::map<std::string, std::string> run_meta_;
  TraceLog& log_;
  std::unique_ptr<at::RecordFunction> step_range_;
  StepAnchors anchors_;
  std::chrono::steady_clock::time_point window_start_;
  ProfileSummary summary_;
};

}  // namespace dtune::train
