// CUDA-event timeline on one GPU's current stream (LibTorch's), read with one event wait.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <chrono>

#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"
#include "train/device_timeline.h"

namespace dtune::train {
namespace {

class CudaTimeline final : public DeviceTimeline {
 public:
  explicit CudaTimeline(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}
  void begin(Clock::time_point origin) override {
    used_ = 0;
    // Event 0 is the device's time zero, `offset_ms_` after the origin (read before the record, so
    // that begin(now) adds nanoseconds, not the record's microseconds, to a short interval).
    offset_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - origin).count();
    record();
  }
  size_t mark() override { return record() - 2; }  // event 0 is the origin's
  std::vector<double> read_ms() override {
    std::vector<double> ms;
    if (used_ < 2) return ms;
    DTUNE_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1].get()));
    for (size_t i = 1; i < used_; ++i)
      ms.push_back(offset_ms_ + CudaEvent::elapsed_ms(events_[0], events_[i]));
    return ms;
  }
  std::string source() const override {
    return "CUDA events on GPU " + std::to_string(device_) + "'s current stream";
  }

 private:
  // The stream of `device_` by index: getCurrentCUDAStream() without one is the current device's
  // stream, GPU 0's on a thread that never set its device, where nothing of this rank runs.
  // Returns the number of events recorded in this set.
  size_t record() {
    if (events_.size() <= used_) {
      const c10::cuda::CUDAGuard guard(device_);  // an event belongs to the device current then
      events_.push_back(CudaEvent::create());
    }
    events_[used_].record(c10::cuda::getCurrentCUDAStream(device_).stream());
    return ++used_;
  }
  c10::DeviceIndex device_;
  std::vector<CudaEvent> events_;  // reused from set to set
  size_t used_ = 0;
  double offset_ms_ = 0;
};

}  // namespace

std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device) {
  return std::make_unique<CudaTimeline>(device);
}

}  // namespace dtune::train
