// Without CUDA there is no device to stage to (see device_stager.h).
#include "core/error.h"
#include "train/device_stager.h"

namespace dtune::train {

std::unique_ptr<DeviceStager> make_device_stager(const torch::Device& device) {
  if (device.is_cuda()) throw UsageError("--device cuda: this build has no CUDA");
  return nullptr;
}

}  // namespace dtune::train
