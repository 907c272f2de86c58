// What dtune-comm measured, as values: one rank's samples of one size (RankSample, and the flat
// vector it travels in through the per-size gather), the summary of one size over every rank
// (SizeSummary) and of one configuration (CommSummary, with the alpha-beta fit). Computed without
// I/O, as google/benchmark's Run, and read by the reporters: the table (table.h), the HDF5 group
// (comm_results.h) and the -J file (nccl_tests_json.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "benchmarks/comm/types.h"
#include "core/stats.h"

namespace dtune::comm {

inline constexpr Placement kPlacements[2] = {Placement::kOutOfPlace, Placement::kInPlace};

// One rank's measurements of one size: per placement (kPlacements' order), whether it ran (not
// for a zero count, or a placement the backend lacks), its iteration times and, when the check
// ran (-c > 0), the number of wrong elements this rank found.
struct RankSample {
  struct PerPlacement {
    bool run = false;
    std::vector<double> times_us;  // (iters) when run, else empty
    bool checked = false;
    int64_t wrong = 0;  // meaningful when checked
  } placement[2];
};

// The gather's flat layout, (2 iters + 2) doubles: out-of-place iterations, in-place iterations,
// wrong out-of-place, wrong in-place. A placement not run has NaN iterations; one not checked a
// wrong count of -1.
size_t packed_size(size_t iters);
std::vector<double> pack(const RankSample& s, size_t iters);
RankSample unpack(std::span<const double> flat, size_t iters);
// Every rank's samples from the gathered vector (nranks × packed_size(iters)), by rank.
std::vector<RankSample> unpack_ranks(std::span<const double> all, size_t nranks, size_t iters);

// One size of one configuration over every rank, both placements.
struct SizeSummary {
  OpShape shape;
  struct PerPlacement {
    bool run = false;
    double time_us = 0;  // reported (combined by -a)
    double algbw_gbps = 0, busbw_gbps = 0;
    int64_t wrong = -1;  // summed over ranks; -1 unchecked
    Summary iters;       // all ranks' iterations
    RankSpread ranks;    // per-rank mean iteration time
  } placement[2];
  std::vector<RankSample> samples;  // by rank
};

// How a configuration ended: every size measured, or cut short by a signal or a timeout.
enum class ConfigEnd { kComplete, kInterrupted, kTimeout };

// One configuration (collective, dtype, op): its sizes in order, the fit of the out-of-place
// medians, and the status its HDF5 group records.
struct CommSummary {
  Collective collective{};
  Dtype dtype{};
  ReduceOp op{};
  int nranks = 1;
  std::vector<SizeSummary> sizes;
  double busbw_factor = 1;
  AlphaBetaFit fit;
  std::string status;  // "ok", "wrong" (a check failed), "interrupted", "timeout"
};

// Statistics of one size from every rank's samples (all ranks ran the same placements). The
// reported time is rank 0's mean, or the avg/min/max over the ranks' means (-a).
SizeSummary summarize_size(const OpShape& s, std::vector<RankSample> samples, TimeMode mode);
CommSummary summarize_config(Collective c, Dtype d, ReduceOp op, int nranks,
                             std::vector<SizeSummary> sizes, ConfigEnd end);

// The whole run's figures for the footer: wrong elements found, and busbw of every measured
// size and placement (nccl-tests' "Avg bus bandwidth" is their plain mean).
struct RunTotals {
  int64_t wrong = 0;
  std::vector<double> busbw_gbps;
  void add(const SizeSummary& s);
};

}  // namespace dtune::comm
