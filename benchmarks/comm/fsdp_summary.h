// What a replayed FSDP step measured, as values (fsdp_replay.h measures it): every rank's samples
// in the flat vector they travel in through the gather, and rank 0's summary of every call over
// the ranks with the step's totals. Read by the reporters: the table (fsdp_table.h) and the HDF5
// group (fsdp_results.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "benchmarks/comm/fsdp_plan.h"
#include "benchmarks/comm/summary.h"

namespace dtune::comm {

// The gather's flat layout: (calls × packed_size(iters)) doubles, each call packed as summary.h's
// pack does.
std::vector<double> pack_calls(const std::vector<RankSample>& calls, size_t iters);
// Every rank's samples from the gathered vector (nranks × calls × packed_size(iters)):
// [rank][call].
std::vector<std::vector<RankSample>> unpack_calls(std::span<const double> all, size_t nranks,
                                                  size_t calls, size_t iters);

// Rank 0's view of the replay: every call's statistics over the ranks (summary.h's SizeSummary,
// the call's placement filled) and the step's totals.
struct FsdpSummary {
  FsdpPlan plan;
  std::vector<SizeSummary> calls;  // by call, as plan.calls
  double step_time_us = 0;         // Σ over the calls of the reported time (-a)
  double forward_time_us = 0;      // the same over the forward calls
  double backward_time_us = 0;     // and over the backward calls
  uint64_t step_bytes = 0;         // Σ over the calls of the size column (bytes per rank)
  double step_algbw_gbps = 0;      // step_bytes / step_time_us
  double step_busbw_gbps = 0;      // × (n-1)/n: every call is an all-gather or reduce-scatter
  int64_t wrong = -1;              // summed over calls and ranks; -1 unchecked
  std::string status;              // "ok", or "wrong" when a check found a wrong element
};

// The index of a call's placement in RankSample / SizeSummary (kPlacements' order).
size_t placement_index(Placement p);
// From every rank's samples (by rank, then by call), combined across ranks by `mode` (-a).
FsdpSummary summarize_fsdp(FsdpPlan plan, const std::vector<std::vector<RankSample>>& by_rank,
                           TimeMode mode);

}  // namespace dtune::comm
