// Hierarchical allreduce as three nonblocking stages (MPI_Ireduce, MPI_Iallreduce, MPI_Ibcast).
#include "core/hierarchical_allreduce.h"

#include "core/error.h"
#include "core/node_map.h"

namespace dtune {

HierarchicalAllreduce::HierarchicalAllreduce(const RunContext& ctx)
    : node_(MpiComm::dup(ctx.node_comm())), leader_(ctx.local_rank() == 0) {
  MPI_Comm leaders = MPI_COMM_NULL;
  DTUNE_MPI_CHECK(MPI_Comm_split(ctx.comm(), leader_ ? 0 : MPI_UNDEFINED, ctx.rank(), &leaders));
  if (leaders != MPI_COMM_NULL) {
    DTUNE_MPI_CHECK(MPI_Comm_set_errhandler(leaders, MPI_ERRORS_RETURN));
    leaders_ = MpiComm(leaders);
  }
}

HierarchicalAllreduce::HierarchicalAllreduce(MPI_Comm comm) {
  const NodeMap nodes = derive_node_map(comm);
  int rank = 0;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  leader_ = nodes.local_rank == 0;
  MPI_Comm node = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
  DTUNE_MPI_CHECK(MPI_Comm_split(comm, nodes.node, rank, &node));
  DTUNE_MPI_CHECK(MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN));
  node_ = MpiComm(node);
  DTUNE_MPI_CHECK(MPI_Comm_split(comm, leader_ ? 0 : MPI_UNDEFINED, rank, &leaders));
  if (leaders != MPI_COMM_NULL) {
    DTUNE_MPI_CHECK(MPI_Comm_set_errhandler(leaders, MPI_ERRORS_RETURN));
    leaders_ = MpiComm(leaders);
  }
}

// Blocking: the library's blocking collectives (Open MPI's tuned ones), which pipeline large
// messages; its nonblocking ones (libnbc) do not, and ran 2-4x slower here from 1 MiB up.
void HierarchicalAllreduce::run(const void* send, void* recv, int count, MPI_Datatype type,
                                MPI_Op op) {
  DTUNE_CHECK(stage_ == Stage::kIdle, "hierarchical allreduce: one operation at a time");
  const bool in_place = send == MPI_IN_PLACE;
  if (leader_) {
    DTUNE_MPI_CHECK(MPI_Reduce(send, recv, count, type, op, 0, node_.get()));
    DTUNE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, recv, count, type, op, leaders_.get()));
  } else {
    DTUNE_MPI_CHECK(MPI_Reduce(in_place ? recv : send, nullptr, count, type, op, 0, node_.get()));
  }
  DTUNE_MPI_CHECK(MPI_Bcast(recv, count, type, 0, node_.get()));
}

void HierarchicalAllreduce::start(const void* send, void* recv, int count, MPI_Datatype type,
                                  MPI_Op op) {
  DTUNE_CHECK(stage_ == Stage::kIdle, "hierarchical allreduce: one operation at a time");
  send_ = send;
  recv_ = recv;
  count_ = count;
  type_ = type;
  op_ = op;
  stage_ = Stage::kReduce;
  begin_stage();
}

// Posts the current stage's operation. The leader reduces into `recv` (in place when the caller
// asked for it), the others contribute their input; the leaders then allreduce `recv` in place,
// and the node's leader broadcasts it.
void HierarchicalAllreduce::begin_stage() {
  switch (stage_) {
    case Stage::kReduce: {
      const bool in_place = send_ == MPI_IN_PLACE;
      const void* in = leader_ ? send_ : (in_place ? recv_ : send_);
      DTUNE_MPI_CHECK(
          MPI_Ireduce(in, leader_ ? recv_ : nullptr, count_, type_, op_, 0, node_.get(), &req_));
      break;
    }
    case Stage::kLeaders:
      DTUNE_MPI_CHECK(
          MPI_Iallreduce(MPI_IN_PLACE, recv_, count_, type_, op_, leaders_.get(), &req_));
      break;
    case Stage::kBroadcast:
      DTUNE_MPI_CHECK(MPI_Ibcast(recv_, count_, type_, 0, node_.get(), &req_));
      break;
    case Stage::kIdle:
      break;
  }
}

bool HierarchicalAllreduce::test() {
  while (stage_ != Stage::kIdle) {
    int done = 1;
    if (req_ != MPI_REQUEST_NULL) DTUNE_MPI_CHECK(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
    if (!done) return false;
    // Non-leaders skip the leaders' stage; a single-rank node has nothing to reduce or broadcast
    // (its stages complete at once).
    stage_ = stage_ == Stage::kReduce    ? (leader_ ? Stage::kLeaders : Stage::kBroadcast)
             : stage_ == Stage::kLeaders ? Stage::kBroadcast
                                         : Stage::kIdle;
    begin_stage();
  }
  return true;
}

}  // namespace dtune
