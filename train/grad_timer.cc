// Per-parameter gradient arrival times in backward.
#include "train/grad_timer.h"

#include <limits>

namespace dtune::train {

namespace {
constexpr double kNotReady = std::numeric_limits<double>::quiet_NaN();
}

GradTimer::GradTimer(const std::vector<torch::Tensor>& params, int ordinal)
    : timeline_(make_timeline(ordinal)) {
  for (const auto& p : params)
    param_bytes_.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
  mark_of_.assign(params.size(), -1);
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor p = params[i];
    p.register_hook([this, i](const torch::Tensor&) { on_grad(i); });
  }
}

void GradTimer::begin(bool timed) {
  std::lock_guard<std::mutex> lock(mutex_);
  timed_ = timed;
  if (timed) timeline_->begin();
}

void GradTimer::on_grad(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!timed_) return;
  mark_of_[i] = static_cast<std::ptrdiff_t>(timeline_->mark());
}

void GradTimer::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<double> ms = timeline_->read_ms();
  std::vector<double> row(mark_of_.size(), kNotReady);
  for (size_t i = 0; i < mark_of_.size(); ++i)
    if (mark_of_[i] >= 0) row[i] = ms[static_cast<size_t>(mark_of_[i])];
  rows_.push_back(std::move(row));
  mark_of_.assign(mark_of_.size(), -1);
  timed_ = false;
}

}  // namespace dtune::train
