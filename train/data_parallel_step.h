// Data parallelism, dtune-train's default mode: every rank holds the whole model, and each
// optimizer step runs its micro-steps (data, host-to-device copy, forward under autocast, backward
// with bucketed, overlapped gradient averaging; grad_sync.h), the loss scaler, the optimizer and
// local SGD's averaging (--local-sgd), timing every phase on every rank (phase_clock.h).
#pragma once

#include <memory>

#include "core/context.h"
#include "train/setup.h"
#include "train/step_strategy.h"

namespace dtune::train {

class RunMonitor;

// Builds data parallelism's parts into `s` (which holds the device and the model): the reducer
// and the initial broadcast (armed on `monitor` for a real run), the fp32 master copy, the
// optimizer, the gradient sync, the gradient timer, the data source, the phase clock and the
// profiler; returns the strategy that steps them. A probe (RunMode::kProbe) builds them for this
// rank alone.
std::unique_ptr<StepStrategy> build_data_parallel(TrainSetup& s, const RunContext& ctx,
                                                  RunMonitor* monitor);

}  // namespace dtune::train
