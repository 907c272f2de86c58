// Which node each rank runs on, derived from every rank's host identity (host name and kernel boot
// id, gathered to every rank) rather than from one MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) call:
// that call trusts the MPI library's locality data, and where it is wrong (Open MPI with PMIx's
// hash store on simulated nodes: the ranks of one node took another node's ranks for peers) the
// ranks disagree about the split and wait for each other forever inside it. A split by a colour
// every rank computed from the same gathered table cannot disagree.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace dtune {

struct NodeMap {
  std::vector<int> rank_node;          // index = rank: the node, numbered by first appearance
  std::vector<std::string> node_host;  // index = node: its host name
  int node = 0;                        // this rank's node
  int local_rank = 0;                  // this rank's position among its node's ranks (rank order)
  int local_size = 1;                  // ranks on this rank's node
  int node_count() const { return static_cast<int>(node_host.size()); }
};

// This kernel's boot id (/proc/sys/kernel/random/boot_id; "" where it cannot be read): equal for
// every process on one physical machine (or VM), simulated nodes (network namespaces) included.
std::string boot_id();
// This rank's key: "<host name> <boot id>" (two machines may share a host name; two simulated
// nodes on one kernel share a boot id but not a host name).
std::string node_key();
// The map from every rank's key (index = rank), seen from `rank`. Pure: unit-tested.
NodeMap node_map_from_keys(const std::vector<std::string>& keys, int rank);
// Collective over `comm`: gathers every rank's node_key() to every rank.
NodeMap derive_node_map(MPI_Comm comm);
// The launcher's own idea of this rank's local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
// MPI_LOCALRANKID), or -1 when it does not say.
int launcher_local_rank();

}  // namespace dtune
