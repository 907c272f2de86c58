// The dtune-comm driver, shared by every collective and backend (as nccl-tests' common.cu): for
// each (collective, dtype, op) and size it checks that every rank arrived, warms up, times every
// iteration, runs the separate check iterations and gathers every rank's samples to rank 0, which
// summarises each size and configuration (summary.h) and hands the summaries to the reporters:
// the table (table.h), the HDF5 group (comm_results.h) and the -J file (nccl_tests_json.h).
#pragma once

#include "benchmarks/comm/options.h"
#include "core/main_guard.h"

namespace dtune::comm {

// Exit status: 0 ok, 1 when a check found wrong elements, 130 when interrupted.
int run_driver(const Options& o, const MainArgs& args);

}  // namespace dtune::comm
