// Device buffers for builds without CUDA: not available, and the message says how to get them.
#include "benchmarks/comm/mpi_buffers.h"
#include "core/error.h"

namespace dtune::comm {

std::unique_ptr<BufferPair> make_device_buffers(const RunContext&) {
  throw UsageError(
      "--mpi-buffers device: this dtune was built without CUDA; rebuild with the CUDA "
      "toolkit found (CUDA_HOME, see doc/setup.md) and a CUDA-aware MPI");
}

}  // namespace dtune::comm
