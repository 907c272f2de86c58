// dtune-train's results: every rank's per-step phase times (gathered to rank 0 step by step and
// written as they come: run_monitor.h, step_log.h), the summary
// (throughput as total samples over total measured time, step-time percentiles, MFU with its
// formula and peak), written as one HDF5 group (results/SCHEMA.md, benchmark "train") and printed
// as one screen by rank 0.
#pragma once

#include <optional>

#include "benchmarks/train/options.h"
#include "core/results_file.h"
#include "train/outcome.h"
#include "train/run_monitor.h"

namespace dtune::train {

// Collective (armed). The steps come from rank 0's monitor.log(), whose group gets the summary and
// its final status (ok, diverged, interrupted). Returns the run's throughput in samples/s (on
// every rank).
double report_training(const Options& o, const RunContext& ctx, const TrainOutcome& out,
                       RunMonitor& monitor);

// Root only: a run that did not fit, recorded with status "oom" and its batch (in the run's group
// when some steps completed, else in a group of its own).
void report_oom(const Options& o, const OutOfMemory& e, RunMonitor& monitor,
                std::optional<ResultsFile>& file);

inline constexpr int kOomExitStatus = 4;

// Rank 0, a run of a mode with results of its own (a pipeline) that timed out: its own part into
// the run's group (the pipeline's: pipeline/ with complete 0, ranks_reported 1) before the run is
// saved; the others cannot be gathered. Never throws (it runs on the way out of a failure).
void write_partial_mode(RunMonitor& monitor, const ModeResults& mode);

}  // namespace dtune::train
