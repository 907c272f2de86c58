// CUDA-event phase timing on the current stream (LibTorch's), read once per step.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "benchmarks/train/phase_clock.h"
#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"

namespace dtune::train {
namespace {

class CudaClock final : public PhaseClock {
 public:
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
  void record(Phase p) {
    if (events_.size() <= marks_.size()) events_.push_back(CudaEvent::create());
    events_[marks_.size()].record(c10::cuda::getCurrentCUDAStream().stream());
    marks_.push_back(p);
  }
  std::vector<CudaEvent> events_;
  std::vector<Phase> marks_;
};

}  // namespace

std::unique_ptr<PhaseClock> make_cuda_clock() { return std::make_unique<CudaClock>(); }

}  // namespace dtune::train
