// Pipeline-parallel training (--pipeline-stages P > 1), combined with data parallelism over the
// ranks that hold the same stage. Each rank builds the whole model from the seed, keeps the chunks
// the partition gives its stage (partition.h) and trains only their parameters; every optimizer
// step runs the schedule's actions (schedule.h) over M micro-batches, activations and gradients
// travelling between neighbouring stages (p2p.h), then the data-parallel gradient average of each
// stage (grad_sync.h over the stage's group), the tied embedding's sum between the end stages, and
// the optimizer. Micro-batch m of data-parallel index d holds the samples one process accumulating
// D x M micro-steps sees at micro-step d x M + m, so the two train identically (the tests). Each
// step is timed per stage and action (pipeline_stats.h). It is a mode of the one Trainer
// (step_strategy.h): the run monitor, the profiler, TensorBoard and the results are the same as for
// data parallelism.
#pragma once

#include <memory>

#include "core/context.h"
#include "train/setup.h"
#include "train/step_strategy.h"

namespace dtune::train {

class RunMonitor;

// Builds this stage's parts into `s` (which holds the device and the whole model): the partition,
// the stage's parameters, the channels between stages, the stage group's reducer and gradient
// sync, the optimizer, the data source and the profiler, armed on `monitor`; returns the strategy
// that runs the schedule.
std::unique_ptr<StepStrategy> build_pipeline(TrainSetup& s, const RunContext& ctx,
                                             RunMonitor& monitor);

}  // namespace dtune::train
