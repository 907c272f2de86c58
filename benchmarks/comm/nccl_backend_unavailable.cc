// The NCCL backend's entry points for builds without CUDA or NCCL: asking for it is a usage
// error that says how to get a build that has it.
#include "benchmarks/comm/backend.h"
#include "core/error.h"

namespace dtune::comm {

std::unique_ptr<Backend> make_nccl_backend(const RunContext& /*ctx*/) {
  throw UsageError(
      "--backend nccl: this dtune was built without NCCL; rebuild with CUDA and NCCL found (set "
      "CUDA_HOME / NCCL_HOME, see doc/setup.md)");
}

bool nccl_backend_built() { return false; }

}  // namespace dtune::comm
