// The HDF5 reporter of a replayed FSDP step: one group /runs/NNNN-fsdp-<model>-<dtype> with
// `benchmark = "comm-fsdp"` (layout in results/SCHEMA.md), written from its summary
// (fsdp_summary.h).
#pragma once

#include <string>

#include "benchmarks/comm/fsdp_summary.h"
#include "benchmarks/comm/options.h"
#include "core/results_file.h"

namespace dtune::comm {

// Writes the step's group and flushes the file. `o` gives the settings the group records
// (iterations, -c, -z, -a, load and gap), `backend` its name.
void write_fsdp_group(ResultsFile& file, const FsdpSummary& s, const Options& o,
                      const std::string& backend);

}  // namespace dtune::comm
