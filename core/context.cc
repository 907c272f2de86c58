// Run context construction and the silent-singleton check.
#include "core/context.h"

#include <unistd.h>

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
  MpiComm local = MpiComm::split_shared(ctx.world_.get());
  ctx.local_rank_ = local.rank();
  ctx.local_size_ = local.size();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  ctx.host_ = host;
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
