// Builds without CUDA have no device to make current.
#include "core/error.h"
#include "train/cuda_device.h"

namespace dtune::train {

void make_cuda_device_current(int) {
  throw UsageError(
      "--device cuda: this dtune was built without CUDA (see doc/setup.md: CUDA_HOME)");
}

}  // namespace dtune::train
