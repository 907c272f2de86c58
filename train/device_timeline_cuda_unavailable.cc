// Builds without CUDA have no GPU timeline.
#include "core/error.h"
#include "train/device_timeline.h"

namespace dtune::train {

std::unique_ptr<DeviceTimeline> make_cuda_timeline(int) {
  throw UsageError(
      "--device cuda: this dtune was built without CUDA (see doc/setup.md: CUDA_HOME)");
}

}  // namespace dtune::train
