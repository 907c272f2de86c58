// dtune-comm's options: nccl-tests' flags and semantics (-b -e -f -i -n -w -c -d -o -r -z -a -J -I,
// and -t/-g accepted at 1) plus dtune's own (collectives, backend, output formats, HDF5 file,
// timeout), and --pattern fsdp: the collective calls of one FSDP training step (fsdp_plan.h).
// Every option can also be set from an environment variable DTUNE_COMM_<NAME> (for
// sweeps); the flag wins.
#pragma once

#include <string>
#include <vector>

#include "benchmarks/comm/backend.h"
#include "benchmarks/comm/fsdp_plan.h"
#include "benchmarks/comm/mpi_buffers.h"
#include "benchmarks/comm/types.h"

namespace dtune::comm {

struct Options {
  uint64_t min_bytes = 32ull << 20;
  uint64_t max_bytes = 32ull << 20;
  uint64_t step_bytes = 1ull << 20;
  int step_factor = 1;  // > 1: multiply; 1: add step_bytes (nccl-tests)
  int iters = 20;
  int warmup_iters = 5;
  int check_iters = 1;
  std::vector<Collective> collectives{Collective::kAllreduce};
  std::vector<Dtype> dtypes{Dtype::kFloat32};
  std::vector<ReduceOp> ops{ReduceOp::kSum};
  int root = 0;
  Blocking blocking = Blocking::kNo;
  TimeMode time_mode = TimeMode::kAvg;
  BackendKind backend = BackendKind::kMpi;
  MpiBuffers mpi_buffers = MpiBuffers::kHost;
  Algorithm algorithm = Algorithm::kFlat;         // allreduce with the MPI backend
  MpiProgress mpi_progress = MpiProgress::kCall;  // --mpi-progress (MPI backend)
  Format format = Format::kTable;
  Pattern pattern = Pattern::kSizes;  // --pattern
  // --pattern fsdp: --model, --shard-unit, --reshard-after-forward, --placement (fsdp_plan.h);
  // the dtype is -d's, one of float32 and bfloat16.
  std::string model;
  ShardUnit shard_unit;
  Reshard reshard = Reshard::kOn;
  FsdpPlacement fsdp_placement = FsdpPlacement::kFsdp2;
  std::string output;            // empty: no HDF5 file
  bool overwrite = false;        // --overwrite: replace an existing output file
  std::string json_path;         // -J: nccl-tests JSON file (empty: none)
  bool per_iter_timing = false;  // -I 1: per-iteration blocks in the -J file
  double timeout_s = 300;
  int gap_us = 0;             // --gap-us: sleep before each timed iteration (0: back to back)
  int load_threads = 0;       // --load-threads: busy threads per rank beside the measurement
  int plant_wrong_rank = -1;  // test-only
  int hang_rank = -1;         // test-only
  std::string command_line;
  std::vector<std::string> args;  // argv as given, for the -J file's "args"

  std::vector<uint64_t> sizes() const;
};

// Parses and validates argv. Returns an exit code to leave with (0 after --help, 2 on a bad flag)
// or -1 to go on. Option errors are identical on every rank; only `print` ranks print them.
int parse_options(int argc, char** argv, bool print, int world_size, Options& out);

}  // namespace dtune::comm
