// Host-to-device staging of loader batches on a copy stream: the next batch's copy runs while the
// current step computes (NVIDIA's data-prefetcher pattern). stage() starts the copy of pinned host
// tensors on the copy stream; take() makes the compute stream wait for it and hands the device
// tensors over (recorded on the compute stream, so the caching allocator does not reuse their
// memory early). Defined in device_stager_cuda.cc with CUDA; without it, a pass-through.
#pragma once

#include <torch/types.h>

#include <memory>
#include <utility>

namespace dtune::train {

class DeviceStager {
 public:
  virtual ~DeviceStager() = default;
  virtual void stage(torch::Tensor input, torch::Tensor target) = 0;
  virtual std::pair<torch::Tensor, torch::Tensor> take() = 0;
};

// nullptr for CPU devices (batches stay where the loader made them).
std::unique_ptr<DeviceStager> make_device_stager(const torch::Device& device);

}  // namespace dtune::train
