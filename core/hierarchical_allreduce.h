// Hierarchical allreduce: reduce within each node to its leader (local rank 0) over shared memory,
// allreduce among the node leaders over the network, broadcast within each node. Only 1/R of the
// ranks send over the network (R ranks per node), so the inter-node link carries the data once
// per node instead of once per rank as a flat ring would: the win where the link is slow and
// ranks per node are many. The same sum as a flat allreduce for exact (integer-valued) inputs.
#pragma once

#include <mpi.h>

#include "core/context.h"

namespace dtune {

class HierarchicalAllreduce {
 public:
  // Collective over ctx.comm(): duplicates the node communicator and splits the leaders' one.
  explicit HierarchicalAllreduce(const RunContext& ctx);
  // Collective over `comm`, a sub-communicator of the job (a pipeline stage's data-parallel
  // group): its nodes are those of its own ranks (derive_node_map over comm), its leaders the
  // first of its ranks on each node.
  explicit HierarchicalAllreduce(MPI_Comm comm);
  HierarchicalAllreduce(const HierarchicalAllreduce&) = delete;
  HierarchicalAllreduce& operator=(const HierarchicalAllreduce&) = delete;

  // Blocking, as MPI_Allreduce (`send` may be MPI_IN_PLACE; `recv` holds the result on every
  // rank).
  void run(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op);
  // Nonblocking (MPI_Ireduce, MPI_Iallreduce, MPI_Ibcast): start(), then test() until it returns
  // true (each call advances the stages), for a caller that must be able to give up. The buffers
  // must stay untouched until then; one operation at a time.
  void start(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op);
  bool test();

 private:
  void begin_stage();

  MpiComm node_;     // this node's ranks, local rank 0 is the leader
  MpiComm leaders_;  // local rank 0 of every node; empty on the other ranks
  bool leader_ = false;
  enum class Stage { kIdle, kReduce, kLeaders, kBroadcast } stage_ = Stage::kIdle;
  MPI_Request req_ = MPI_REQUEST_NULL;
  const void* send_ = nullptr;
  void* recv_ = nullptr;
  int count_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Op op_ = MPI_OP_NULL;
};

}  // namespace dtune
