// An empty kernel, for the launch-overhead probe: what one launch costs with no work in it.
// Only built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

namespace dtune::kernels {

// Enqueues one empty kernel (1 block of 1 thread) on `stream`; throws on a launch error.
void launch_empty_kernel(cudaStream_t stream);

}  // namespace dtune::kernels
