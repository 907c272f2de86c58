// The run context: who this rank is and the communicators it uses. Passed explicitly to every
// component instead of globals (rank, local rank, device and communicators travel here).
#pragma once

#include <string>
#include <vector>

#include "core/mpi_session.h"
#include "core/node_map.h"

namespace dtune {

class RunContext {
 public:
  // Collective over MPI_COMM_WORLD: duplicates it (dtune never uses the user's world directly),
  // finds each rank's node from the gathered host names (core/node_map.h: not
  // MPI_Comm_split_type, which hangs where the MPI library's locality data is wrong) and splits
  // a node communicator by it. A rank whose launcher numbers it differently within its node
  // (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) says so on stderr.
  static RunContext create();
  // The same, recording the thread level MPI was initialised with (MpiSession::thread_level());
  // create() asks MPI for it (MPI_Query_thread).
  static RunContext create(int mpi_thread_level);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // This rank's node (0..node_count()-1, numbered by the lowest rank on it), every rank's node
  // (index = rank) and each node's host name.
  int node() const { return nodes_.node; }
  int node_count() const { return nodes_.node_count(); }
  const std::vector<int>& rank_node() const { return nodes_.rank_node; }
  const std::vector<std::string>& node_host() const { return nodes_.node_host; }
  // The ranks of this rank's node, ordered by world rank (local rank = rank in it). Duplicate it
  // before communicating on it.
  MPI_Comm node_comm() const { return node_comm_.get(); }
  const std::string& host() const { return host_; }
  MPI_Comm comm() const { return world_.get(); }
  // Used only to agree on how a run ends (core/main_guard.cc): a collective there can never be
  // matched against one the failing code path left half-done on comm().
  MPI_Comm ending_comm() const { return ending_.get(); }
  bool is_root() const { return rank_ == 0; }
  // MPI_THREAD_MULTIPLE when any thread may call MPI (a watchdog may then MPI_Abort).
  int mpi_thread_level() const { return mpi_thread_level_; }

  // The silent-singleton launch: the launcher says N > 1 processes but MPI sees one. Returns the
  // launcher's count and the variable that said so, or 0 when there is nothing to warn about.
  struct LauncherMismatch {
    int expected = 0;
    std::string variable;
  };
  LauncherMismatch launcher_mismatch() const;

 private:
  MpiComm world_;
  MpiComm ending_;
  MpiComm node_comm_;
  NodeMap nodes_;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_;
  int mpi_thread_level_ = MPI_THREAD_SINGLE;
};

}  // namespace dtune
