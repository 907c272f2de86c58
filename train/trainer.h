// The training loop of dtune-train, one for every mode: over the parts a TrainSetup built
// (setup.h), each optimizer step is the mode's (step_strategy.h: data parallelism,
// data_parallel_step.h; pipeline parallelism, pipeline/pipeline_step.h). Observers watch the steps
// from outside (step_observer.h: the run monitor, profiler, TensorBoard, divergence guard) and the
// test hooks sit in one FaultInjector (fault_injector.h). Results:
// benchmarks/train/train_results.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/main_guard.h"
#include "models/tensor_parallel.h"
#include "train/config.h"
#include "train/divergence.h"
#include "train/fault_injector.h"
#include "train/outcome.h"
#include "train/setup.h"
#include "train/step_observer.h"

namespace dtune::train {

class RunMonitor;

class Trainer {
 public:
  // kTrain needs `monitor`: every step runs armed against --timeout and its record goes to rank
  // 0's results file as it completes.
  Trainer(TrainSetup& setup, const RunContext& ctx, RunMonitor* monitor);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Optimizer step `step` (warm-up steps first, from 0), with the observers around it. Returns
  // false when the ranks agreed to end the run after it (divergence, a stop request). Throws
  // OutOfMemory when the step's tensors exceed the memory limit.
  bool step(int step);
  // After the last step: the profile and data summaries; for a real run, local SGD's closing
  // average, the final divergence check and the peak memory.
  TrainOutcome finish();

 private:
  void check_memory() const;

  TrainSetup& s_;
  const RunContext& ctx_;
  RunMonitor* monitor_;
  StepStrategy& strategy_;  // s_.strategy
  FaultInjector faults_;
  DivergenceGuard* divergence_ = nullptr;  // among observers_
  models::TpGroup::Traffic tp_traffic_;    // over the measured steps
  int tp_steps_ = 0;
  std::vector<std::unique_ptr<StepObserver>> observers_;
  TrainOutcome out_;
};

// One run at `batch`: builds its setup and trains it for --warmup-steps + --steps (a probe: two
// steps, alone). A CPU allocation failure (std::bad_alloc, LibTorch's CPU allocator) or a CUDA
// out-of-memory is thrown as OutOfMemory.
TrainOutcome run_training(const Options& o, const MainArgs& a, int64_t batch, RunMode mode,
                          RunMonitor* monitor);

}  // namespace dtune::train
