// CUDA-event phase timing on the rank's device's current stream (LibTorch's), read once per step.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"
#include "train/phase_clock.h"

namespace dtune::train {
namespace {

class CudaClock final : public PhaseClock {
 public:
  explicit CudaClock(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}
  void begin_step() override {
    marks_.clear();
    record(Phase::kCount);
  }
  void mark(Phase p) override { record(p); }
  PhaseTimes end_step(double& total_ms) override {
    PhaseTimes t{};
    DTUNE_CUDA_CHECK(cudaEventSynchronize(events_[marks_.size() - 1].get()));
    for (size_t i = 1; i < marks_.size(); ++i)
      t[static_cast<size_t>(marks_[i])] += CudaEvent::elapsed_ms(events_[i - 1], events_[i]);
    total_ms = CudaEvent::elapsed_ms(events_[0], events_[marks_.size() - 1]);
    return t;
  }

 private:
  // The stream of `device_` by index: getCurrentCUDAStream() without one is the current device's
  // stream, GPU 0's on a thread that never set its device, where nothing of this rank runs.
  void record(Phase p) {
    if (events_.size() <= marks_.size()) {
      const c10::cuda::CUDAGuard guard(
          device_);  // an event belongs to the device current at creation
      events_.push_back(CudaEvent::create());
    }
    events_[marks_.size()].record(c10::cuda::getCurrentCUDAStream(device_).stream());
    marks_.push_back(p);
  }
  c10::DeviceIndex device_;
  std::vector<CudaEvent> events_;
  std::vector<Phase> marks_;
};

}  // namespace

std::unique_ptr<PhaseClock> make_cuda_clock(int device) {
  return std::make_unique<CudaClock>(device);
}

}  // namespace dtune::train
