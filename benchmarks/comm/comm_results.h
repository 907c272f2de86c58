// The HDF5 reporter: one configuration's group in the results file (/runs/NNNN-<collective>-
// <dtype>[-<op>], layout in results/SCHEMA.md), written from its summary (summary.h).
#pragma once

#include <string>

#include "benchmarks/comm/options.h"
#include "benchmarks/comm/summary.h"
#include "core/results_file.h"

namespace dtune::comm {

// Writes the group of `c` and flushes the file; nothing for a configuration with no sizes.
// `o` gives the settings the group records (iterations, -c, -z, -a, root), `backend` its name.
void write_comm_group(ResultsFile& file, const CommSummary& c, const Options& o,
                      const std::string& backend);
// The timing settings every dtune-comm group records (iters, warmup_iters, check_iters, blocking,
// time_mode, load_threads, gap_us): the collectives' groups and --pattern fsdp's alike.
void write_timing_attrs(hid_t id, const Options& o);

}  // namespace dtune::comm
