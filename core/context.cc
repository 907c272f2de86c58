// Run context construction and the silent-singleton check.
#include "core/context.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace dtune {

RunContext RunContext::create() {
  int level = MPI_THREAD_SINGLE;
  DTUNE_MPI_CHECK(MPI_Query_thread(&level));
  return create(level);
}

RunContext RunContext::create(int mpi_thread_level) {
  RunContext ctx;
  ctx.mpi_thread_level_ = mpi_thread_level;
  ctx.world_ = MpiComm::dup(MPI_COMM_WORLD);
  ctx.ending_ = MpiComm::dup(MPI_COMM_WORLD);
  ctx.rank_ = ctx.world_.rank();
  ctx.world_size_ = ctx.world_.size();
  ctx.nodes_ = derive_node_map(ctx.world_.get());
  MPI_Comm node = MPI_COMM_NULL;
  DTUNE_MPI_CHECK(MPI_Comm_split(ctx.world_.get(), ctx.nodes_.node, ctx.rank_, &node));
  DTUNE_MPI_CHECK(MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN));
  ctx.node_comm_ = MpiComm(node);
  ctx.local_rank_ = ctx.nodes_.local_rank;
  ctx.local_size_ = ctx.nodes_.local_size;
  DTUNE_CHECK(ctx.node_comm_.rank() == ctx.local_rank_ && ctx.node_comm_.size() == ctx.local_size_,
              "node communicator disagrees with the gathered host names");
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  ctx.host_ = host;
  const int launcher = launcher_local_rank();
  if (launcher >= 0 && launcher != ctx.local_rank_)
    std::fprintf(
        stderr,
        "dtune: warning: rank %d on %s: the launcher says local rank %d, the gathered host "
        "names say %d (of %d on this node); dtune uses %d\n",
        ctx.rank_, host, launcher, ctx.local_rank_, ctx.local_size_, ctx.local_rank_);
  return ctx;
}

RunContext::LauncherMismatch RunContext::launcher_mismatch() const {
  if (world_size_ != 1) return {};
  // Variables set by the launchers people use: Slurm's srun, Open MPI's mpirun, PMI/PMIx, MPICH.
  for (const char* var :
       {"SLURM_NTASKS", "SLURM_NPROCS", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(var);
    if (v == nullptr) continue;
    const int n = std::atoi(v);
    if (n > 1) return {n, var};
  }
  return {};
}

}  // namespace dtune
