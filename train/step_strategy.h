// How a training mode computes one optimizer step over the parts a TrainSetup built (setup.h).
// The Trainer (trainer.h) owns everything around the step that every mode shares: the observers
// (the run monitor's armed step and per-step exchange, the profiler window, TensorBoard, the
// divergence guard), the test hooks (fault_injector.h), the step records and the outcome. A mode
// is a strategy: data parallelism (data_parallel_step.h) and pipeline parallelism
// (pipeline/pipeline_step.h) today.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/fault_injector.h"
#include "train/outcome.h"
#include "train/step_observer.h"

namespace dtune::train {

class StepStrategy {
 public:
  virtual ~StepStrategy() = default;

  // What this rank is doing in step `step`, for the watchdog's message when it times out.
  virtual std::string describe_step(int step) const = 0;
  // Samples the whole job trains per optimizer step (TensorBoard's samples/s).
  virtual double global_batch() const = 0;
  // Whether every rank holds all the parameters and keeps them equal: the divergence guard, local
  // SGD's closing average and --debug-dump of the whole model apply.
  virtual bool replicated() const = 0;
  // An observer of the mode's own, called inside the run monitor's and outside the profiler's
  // (the pipeline's trace window); null for none.
  virtual std::unique_ptr<StepObserver> observer() { return nullptr; }
  // The timed step: phases, total, loss and `skipped` into `rec` (whose loss_scale is set).
  virtual void run_step(int step, StepRecord& rec, const FaultInjector& faults) = 0;
  // After the last step: the mode's part of the outcome. `out` holds the steps and what every
  // mode shares (the model, the device, the profile); replicated modes' memory and checks follow.
  virtual void finish(TrainOutcome& out) = 0;
};

}  // namespace dtune::train
