// When each parameter's gradient becomes ready in backward: the input of the scaling model
// (`dtune model`, report/dtune_report/scaling_model.py), which replays the trainer's bucketed,
// overlapped reduction for any bucket size and rank count from a 1-rank run. A hook per parameter
// marks the rank's DeviceTimeline when autograd hands it the gradient (the moment GradSync copies
// it into its bucket), relative to begin(), which the trainer calls where the backward phase
// starts. Only the micro-step that synchronises is timed (the last one). On a GPU the mark is a
// CUDA event on the current stream, so the time is when the kernels that computed the gradient
// (and the bucket copy) finished, not when the host ran the hook.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "train/device_timeline.h"

namespace dtune::train {

class GradTimer {
 public:
  // Hooks every parameter of `params` (registered after GradSync's, so a multi-rank run's times
  // include the copy into the bucket).
  // `ordinal`: the rank's GPU, or -1 on the CPU.
  GradTimer(const std::vector<torch::Tensor>& params, int ordinal);
  GradTimer(const GradTimer&) = delete;
  GradTimer& operator=(const GradTimer&) = delete;

  // Before a micro-step's backward: `timed` is true for the micro-step that synchronises.
  void begin(bool timed);
  // After the step: appends the step's row (ms after begin() per parameter; NaN for a parameter
  // whose gradient never arrived) to rows(), and starts a fresh one.
  void end_step();

  // (S, P): one row per step, parameters in model order.
  const std::vector<std::vector<double>>& rows() const { return rows_; }
  // (P,): each parameter's bytes in its own dtype.
  const std::vector<int64_t>& param_bytes() const { return param_bytes_; }

 private:
  void on_grad(size_t param);

  std::vector<int64_t> param_bytes_;
  std::unique_ptr<DeviceTimeline> timeline_;
  std::vector<std::ptrdiff_t> mark_of_;  // (P,) the timeline's mark of each gradient, -1: none
  std::vector<std::vector<double>> rows_;
  bool timed_ = false;
  std::mutex mutex_;  // hooks run on autograd's threads
};

}  // namespace dtune::train
