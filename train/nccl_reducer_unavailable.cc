// Builds without NCCL have no NCCL reducer.
#include "core/error.h"
#include "train/reducer.h"

namespace dtune::train {

std::unique_ptr<Reducer> make_nccl_reducer(const RunContext&, int, double) {
  throw UsageError(
      "--backend nccl: this dtune was built without NCCL (see doc/setup.md: NCCL_HOME)");
}

std::unique_ptr<Reducer> make_nccl_reducer(MPI_Comm, int, double) {
  throw UsageError(
      "--backend nccl: this dtune was built without NCCL (see doc/setup.md: NCCL_HOME)");
}

}  // namespace dtune::train
