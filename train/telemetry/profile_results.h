// What a --profile-steps window produced on each rank (profiler.h), gathered to rank 0, printed
// as the operator table and written into the run's HDF5 group as "profile" (results/SCHEMA.md).
// The profiler's overhead is the median step time inside the window over the median of the other
// measured steps, minus one (steps are timed by the phase clock either way). Torch-free.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "train/telemetry/op_table.h"

namespace dtune::train {

struct ProfileSummary {
  bool ran = false;
  int first_step = 0, steps = 0;
  bool device = false;   // CUDA activities were profiled (table sorted by self device time)
  double window_us = 0;  // wall time of the profiled steps on this rank
  double finish_ms = 0;  // building the table and writing the trace, after the window
  std::string trace_path;
  std::vector<OpRow> table;
};

// Collective; rank 0 gets every rank's summary (index = rank), the others {}.
std::vector<ProfileSummary> gather_profiles(MPI_Comm comm, const ProfileSummary& mine);

struct ProfileOverhead {
  double profiled_p50_ms = 0, unprofiled_p50_ms = 0;
  double overhead = 0;  // NaN when every measured step was profiled
};

// Root only.
void print_profile(const std::vector<ProfileSummary>& all, const ProfileOverhead& cost, size_t top);
void write_profile(hid_t run_group, const std::vector<ProfileSummary>& all,
                   const ProfileOverhead& cost);

}  // namespace dtune::train
