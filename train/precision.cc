// Autocast guard, TF32 switches and the dynamic loss scaler.
#include "train/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>

namespace dtune::train {

AutocastGuard::AutocastGuard(Precision p, torch::DeviceType device) : device_(device) {
  if (p != Precision::kFp16 && p != Precision::kBf16) return;
  enabled_ = true;
  prev_enabled_ = at::autocast::is_autocast_enabled(device_);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, p == Precision::kFp16 ? at::kHalf : at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  // Casts of weights are cached while autocast is on; Python clears the cache on leaving the
  // outermost autocast region, and so must we, or stale casts survive the optimizer step.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
}

void set_tf32(bool on) {
  at::globalContext().setAllowTF32CuBLAS(on);
  at::globalContext().setAllowTF32CuDNN(on);
}

LossScaler::LossScaler(bool enabled, const torch::Device& device) : enabled_(enabled) {
  auto opts = torch::TensorOptions().device(device);
  scale_ = torch::full({1}, 65536.0, opts.dtype(torch::kFloat));
  growth_tracker_ = torch::zeros({1}, opts.dtype(torch::kInt));
}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.scalar_type()) : loss;
}

torch::Tensor LossScaler::unscale(const std::vector<torch::Tensor>& grads) {
  torch::Tensor found_inf = torch::zeros({1}, scale_.options());
  if (!enabled_) return found_inf;
  const torch::Tensor inv = scale_.reciprocal();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
  return found_inf;
}

void LossScaler::update(const torch::Tensor& found_inf) {
  if (!enabled_) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, 2.0, 0.5, 2000);
}

double LossScaler::current() const { return enabled_ ? scale_.item<double>() : 1.0; }

}  // namespace dtune::train
