// --batch auto: the largest per-rank batch whose step fits (CPU: tensors within --memory-limit-mb;
// GPU: no out-of-memory, with a 10% margin of device memory kept free), by doubling then
// bisection; every rank probes alone (RunMode::kProbe) and the ranks take the smallest answer (an
// armed agreement).
#pragma once

#include <cstdint>

#include "core/main_guard.h"
#include "train/config.h"
#include "train/run_monitor.h"

namespace dtune::train {

int64_t find_batch(const Options& o, const MainArgs& a, RunMonitor& monitor);

}  // namespace dtune::train
