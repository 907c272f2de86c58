// dtune-train's summary of one run, computed apart from printing and writing it (as
// google/benchmark's Run feeds its ConsoleReporter and JSONReporter): throughput as total samples
// over total measured time, step-time percentiles, MFU with its formula and peak, the data
// loaders' totals. Pure: no I/O, no MPI; report_training gathers, summarizes, then prints and
// writes on rank 0.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/stats.h"
#include "train/config.h"
#include "train/mfu.h"
#include "train/outcome.h"
#include "train/telemetry/profile_results.h"

namespace dtune::train {

struct TrainSummary {
  size_t ranks = 0;
  std::vector<double> slowest_ms;  // per step (warm-up first): the slowest rank's total
  double global_batch = 0;         // batch x ranks x accumulation steps
  // The measured steps: after warm-up, without the --profile-steps window unless nothing else is
  // left.
  int used_steps = 0;
  int skipped = 0;  // measured steps skipped for inf/NaN gradients (warm-up excluded)
  double samples = 0, seconds = 0;
  double samples_per_s = 0, tokens_per_s = 0;
  Summary step_ms;  // of the measured steps' slowest-rank times
  double p90_ms = 0;
  Peak peak;
  double mfu = 0, alt_mfu = 0;
  // False when a peak had to be rejected for being below the achieved FLOP/s (train/mfu.h,
  // checked_mfu); `mfu_rejected` names each rejected source.
  bool mfu_valid = true;
  std::string mfu_rejected;
  bool unprofiled_left = false;  // some measured step ran outside the --profile-steps window
  ProfileOverhead profile_cost;  // set when `profiled`
  DataSummary data;              // summed over ranks; source: rank 0's
  std::string status;            // ok, diverged, interrupted
};

// The inverse of DataSummary::numbers() (values in the order of kDataSummaryFields): a gathered
// rank's.
DataSummary data_summary_from_numbers(std::string source, std::span<const double> v);

// `slowest_ms`: per step, the slowest rank's total (index = step, one per out.steps entry run);
// `data_total`: every rank's DataSummary summed; `profiled`: a --profile-steps summary exists.
TrainSummary summarize_training(const Options& o, size_t ranks, const TrainOutcome& out,
                                std::span<const double> slowest_ms, const DataSummary& data_total,
                                bool profiled);

}  // namespace dtune::train
