// Copy-stream staging with CUDA (see device_stager.h).
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "train/device_stager.h"

namespace dtune::train {
namespace {

class CudaStager final : public DeviceStager {
 public:
  explicit CudaStager(const torch::Device& device)
      : device_(device),
        copy_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}

  void stage(torch::Tensor input, torch::Tensor target) override {
    c10::cuda::CUDAStreamGuard guard(copy_);
    input_ = input.to(device_, /*non_blocking=*/true);
    target_ = target.to(device_, /*non_blocking=*/true);
    ready_.record(copy_);
  }

  std::pair<torch::Tensor, torch::Tensor> take() override {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    ready_.block(compute);
    input_.record_stream(compute);
    target_.record_stream(compute);
    return {std::exchange(input_, {}), std::exchange(target_, {})};
  }

 private:
  torch::Device device_;
  c10::cuda::CUDAStream copy_;
  at::cuda::CUDAEvent ready_;
  torch::Tensor input_, target_;
};

}  // namespace

std::unique_ptr<DeviceStager> make_device_stager(const torch::Device& device) {
  if (!device.is_cuda()) return nullptr;
  return std::make_unique<CudaStager>(device);
}

}  // namespace dtune::train
