// The FSDP step replayed on every rank (dtune-comm --pattern fsdp): -w whole steps of warm-up,
// then -n timed steps, each call of a step timed on its own by the backend as dtune-comm times
// every collective (MPI: the steady clock around the call; NCCL: CUDA events on its stream), so
// each call runs between the step's neighbours, with the sizes changing as they do in training;
// then -c steps of check calls on fresh check data, each result compared with the exact one.
#pragma once

#include <optional>
#include <vector>

#include "benchmarks/comm/backend.h"
#include "benchmarks/comm/fsdp_plan.h"
#include "benchmarks/comm/options.h"
#include "benchmarks/comm/summary.h"
#include "core/arrival.h"
#include "core/context.h"
#include "core/rank_board.h"
#include "core/watchdog.h"

namespace dtune::comm {

// What the replay uses of the driver's: the backend, the arrival check before every step, the
// rank board and the watchdog every call waits under.
struct ReplayParts {
  Backend& backend;
  const RunContext& ctx;
  ArrivalCheck& arrival;
  RankBoard& board;
  Watchdog& watchdog;
  uint64_t& step;  // the rank board's step counter, advanced once per replayed step
};

// Every rank: this rank's samples, one per call of `plan` (the call's placement run, with -n
// times and, with -c, the wrong elements), or nullopt when the ranks agreed to stop (a signal).
// Throws UsageError before anything runs when the backend lacks a call's shape.
std::optional<std::vector<RankSample>> replay_fsdp_step(const FsdpPlan& plan, const Options& o,
                                                        ReplayParts parts);

}  // namespace dtune::comm
