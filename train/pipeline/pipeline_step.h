// Pipeline-parallel training (--pipeline-stages P > 1), combined with data parallelism over the
// ranks that hold the same stage. Each rank builds the whole model from the seed, keeps the chunks
// the partition gives its stage (partition.h) and trains only their parameters; every optimizer
// step runs the schedule's actions (schedule.h) over M micro-batches, activations and gradients
// travelling between neighbouring stages (p2p.h), then the data-parallel gradient average of each
// stage (grad_sync.h over the stage's group), the tied embedding's sum between the end stages, and
// the optimizer. Micro-batch m of data-parallel index d holds the samples one process accumulating
// D x M micro-steps sees at micro-step d x M + m, so the two train identically (the tests). Each
// step is timed per stage and action (pipeline_stats.h); the run monitor arms and logs each step as
// it does for data parallelism.
#pragma once

#include <cstdint>

#include "core/main_guard.h"
#include "train/config.h"
#include "train/outcome.h"

namespace dtune::train {

class RunMonitor;

TrainOutcome run_pipeline(const Options& o, const MainArgs& a, int64_t batch, RunMonitor& monitor);

}  // namespace dtune::train
