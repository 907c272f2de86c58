// Rank 0's table of a replayed FSDP step (dtune-comm --pattern fsdp), in nccl-tests' manner:
// '#'-commented headers, one data row per call (so `grep -v '^#'` gives clean data), and the
// step's totals as '#' lines. A reporter: it prints the plan and the summary it is given.
#pragma once

#include <cstdio>
#include <string>

#include "benchmarks/comm/fsdp_plan.h"
#include "benchmarks/comm/fsdp_summary.h"

namespace dtune::comm {

// Before the replay: the model, the settings and one '#' line per unit.
void print_fsdp_plan(std::FILE* out, const FsdpPlan& plan, const std::string& backend);
// After it: one row per call (index, phase, unit, collective, placement, size, count, type, time,
// algbw, busbw, wrong) and the step's totals.
void print_fsdp_calls(std::FILE* out, const FsdpSummary& s);

}  // namespace dtune::comm
