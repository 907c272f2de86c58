// The observers that record a training run (step_observer.h): the run monitor's armed step and
// per-step exchange (run_monitor.h), the profiler's window (telemetry/profiler.h) and TensorBoard
// scalars (telemetry/tensorboard.h). The divergence guard is in divergence.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/run_monitor.h"
#include "train/step_observer.h"
#include "train/step_strategy.h"
#include "train/telemetry/profiler.h"
#include "train/telemetry/tensorboard.h"

namespace dtune::train {

// Every step runs armed against --timeout, its communication included; at its end the ranks
// exchange their records (rank 0 logs them) and agree on a stop request (out.interrupted).
class MonitorObserver final : public StepObserver {
 public:
  // The watchdog's message for a step is the mode's (StepStrategy::describe_step).
  MonitorObserver(RunMonitor& monitor, int64_t batch, const StepStrategy& strategy);
  void begin_step(int step, StepRecord& rec) override;
  void end_step(int step, const StepRecord& rec, TrainOutcome& out) override;

 private:
  RunMonitor& monitor_;
  const StepStrategy& strategy_;
  RunMonitor::Armed armed_;
};

// --profile-steps: opens and closes the profiler around the steps of its window, which are marked
// `profiled` (left out of the throughput).
class ProfilerObserver final : public StepObserver {
 public:
  explicit ProfilerObserver(StepProfiler& profiler) : profiler_(profiler) {}
  void begin_step(int step, StepRecord& rec) override;
  void end_step(int step, const StepRecord& rec, TrainOutcome& out) override;

 private:
  StepProfiler& profiler_;
};

// --tensorboard DIR: loss, step time, samples/s, the loss scale (fp16) and every phase's time per
// step, into DIR/rank<r>/, flushed after each step.
class TensorBoardObserver final : public StepObserver {
 public:
  TensorBoardObserver(const std::string& dir, int rank, double global_batch, bool loss_scaling);
  void end_step(int step, const StepRecord& rec, TrainOutcome& out) override;

 private:
  TensorBoardWriter writer_;
  double global_batch_;
  bool loss_scaling_;
};

}  // namespace dtune::train
