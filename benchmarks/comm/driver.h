// The dtune-comm driver, shared by every collective and backend (as nccl-tests' common.cu): for each
// (collective, dtype, op) and size it checks that every rank arrived, warms up, times every
// iteration, runs the separate check iterations, gathers to rank 0, prints the row, and at the
// end of each configuration writes its HDF5 group.
#pragma once

#include "benchmarks/comm/options.h"
#include "core/main_guard.h"

namespace dtune::comm {

// Exit status: 0 ok, 1 when a check found wrong elements, 130 when interrupted.
int run_driver(const Options& o, const MainArgs& args);

}  // namespace dtune::comm
