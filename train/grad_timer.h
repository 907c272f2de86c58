// When each parameter's gradient becomes ready in backward: the input of the scaling model
// (`dtune model`, report/dtune_report/scaling_model.py), which replays the trainer's bucketed,
// overlapped reduction for any bucket size and rank count from a 1-rank run. A hook per parameter
// reads the steady clock when autograd hands it the gradient (the moment GradSync copies it into
// its bucket), relative to begin(), which the trainer calls where the backward phase starts. Only
// the micro-step that synchronises is timed (the last one). Host times: on a GPU they say when
// autograd ran the hook on the host, which can precede the kernels that compute the gradient.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace dtune::train {

class GradTimer {
 public:
  // Hooks every parameter of `params` (registered after GradSync's, so a multi-rank run's times
  // include the copy into the bucket).
  explicit GradTimer(const std::vector<torch::Tensor>& params);
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

  using Clock = std::chrono::steady_clock;
  std::vector<int64_t> param_bytes_;
  std::vector<double> current_;  // (P,) ms after begin()
  std::vector<std::vector<double>> rows_;
  Clock::time_point t0_;
  bool timed_ = false;
  std::mutex mutex_;  // hooks run on autograd's threads
};

}  // namespace dtune::train
