// Provenance: everything needed to know where and how a result was measured: hosts and the
// rank -> host/device map, library versions (MPI, NCCL, CUDA runtime and driver, LibTorch,
// compiler), the git revision and whether the tree was dirty, the launcher's and libraries'
// environment variables, the command line and the start time, and the machine's topology
// (core/topology.h: rank 0's node).
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/topology.h"

namespace dtune {

struct Provenance {
  std::string command_line;
  std::string start_time;  // ISO 8601 UTC
  int world_size = 1;
  std::vector<std::string> rank_host;    // index = rank (filled on rank 0 only)
  std::vector<std::string> rank_device;  // "cpu" or "cuda:0 NVIDIA H200 (...)"
  std::vector<long long> rank_local_rank;
  std::vector<long long> rank_node;  // node index (core/node_map.h), index = rank
  // The kernel's boot id of each rank: ranks with the same one share a physical machine (and its
  // cores), whatever node (network namespace, host name) they count as.
  std::vector<std::string> rank_boot_id;
  int nodes = 1;
  std::vector<std::pair<std::string, std::string>> env;  // rank 0's matching variables, sorted
  std::string mpi_library_version, mpi_standard_version;
  std::string nccl_version;
  std::string cuda_runtime_version, cuda_driver_version;
  Topology topology;  // rank 0's node (detected on rank 0 only)
};

// The prefixes of environment variables recorded (NCCL_, UCX_, OMPI_, SLURM_, OMP_, ...).
const std::vector<std::string>& recorded_env_prefixes();
std::vector<std::pair<std::string, std::string>> recorded_environment();

// Collective over ctx.comm(): every rank contributes its host, boot id and device.
Provenance collect_provenance(const RunContext& ctx, const std::string& command_line,
                              const std::string& device, const std::string& nccl_version);
// Root only: writes /provenance (see results/SCHEMA.md); end_time is added when the file is
// finished (ResultsFile::finish).
void write_provenance(hid_t file, const Provenance& p);

std::string iso8601_utc_now();

}  // namespace dtune
