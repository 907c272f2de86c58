// Setting the current CUDA device (see cuda_device.h).
#include "train/cuda_device.h"

#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/cuda/cuda_error.h"
#include "core/error.h"

namespace dtune::train {

void make_cuda_device_current(int ordinal) {
  // c10::cuda::set_device calls cudaSetDevice; LibTorch's current device and the runtime's are the
  // same per-thread state, which the check below reads back.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(ordinal));
  int current = -1;
  DTUNE_CUDA_CHECK(cudaGetDevice(&current));
  DTUNE_CHECK(current == ordinal, "cudaSetDevice(" + std::to_string(ordinal) + ") left device " +
                                      std::to_string(current) + " current");
}

}  // namespace dtune::train
