// Builds without CUDA have no device to make current.
#include "train/cuda_device.h"
#include "core/error.h"

namespace dtune::train {

void make_cuda_device_current(int) {
  throw UsageError("--device cuda: this dtune was built without CUDA (see README: CUDA_HOME)");
}

}  // namespace dtune::train
