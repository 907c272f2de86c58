// Per-parameter gradient arrival times in backward.
#include "train/grad_timer.h"

#include <limits>

namespace dtune::train {

namespace {
constexpr double kNotReady = std::numeric_limits<double>::quiet_NaN();
}

GradTimer::GradTimer(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params)
    param_bytes_.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
  current_.assign(params.size(), kNotReady);
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor p = params[i];
    p.register_hook([this, i](const torch::Tensor&) { on_grad(i); });
  }
}

void GradTimer::begin(bool timed) {
  std::lock_guard<std::mutex> lock(mutex_);
  timed_ = timed;
  t0_ = Clock::now();
}

void GradTimer::on_grad(size_t i) {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!timed_) return;
  current_[i] = std::chrono::duration<double, std::milli>(now - t0_).count();
}

void GradTimer::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  rows_.push_back(current_);
  current_.assign(current_.size(), kNotReady);
  timed_ = false;
}

}  // namespace dtune::train
