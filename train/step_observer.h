// What watches the training loop without being part of a step: each observer is called before a
// step starts and after its clock has stopped. The trainer calls begin_step in the order the
// observers were added and end_step in the reverse order, so they nest like scopes (the monitor,
// added first, arms before and exchanges after everything else). Observers that communicate do so
// on every rank in the same order.
#pragma once

#include "train/outcome.h"

namespace dtune::train {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before optimizer step `step` (warm-up included) starts; may mark the record (profiled).
  virtual void begin_step(int /*step*/, StepRecord& /*rec*/) {}
  // After the step: may end the run on every rank by setting out.diverged or out.interrupted
  // (a verdict all ranks share).
  virtual void end_step(int /*step*/, const StepRecord& /*rec*/, TrainOutcome& /*out*/) {}
};

}  // namespace dtune::train
