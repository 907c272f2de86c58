// Mixed precision in C++: autocast around forward and loss (fp16 or bf16 on the model's device
// type, the autocast weight cache cleared on exit, as Python's torch.autocast does), TF32 switches,
// and fp16's dynamic loss scaling built from the ATen ops Python's GradScaler calls
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_).
#pragma once

#include <torch/types.h>

#include <vector>

#include "train/config.h"

namespace dtune::train {

class AutocastGuard {
 public:
  AutocastGuard(Precision p, torch::DeviceType device);
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  ~AutocastGuard();

 private:
  bool enabled_ = false;
  torch::DeviceType device_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

// TF32 for cuBLAS and cuDNN: on for --precision tf32, off otherwise (so fp32 means fp32).
void set_tf32(bool on);

// GradScaler's defaults: initial scale 2^16, growth ×2 after 2000 good steps, backoff ×0.5.
class LossScaler {
 public:
  LossScaler(bool enabled, const torch::Device& device);
  bool enabled() const { return enabled_; }
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Unscales gradients in place and returns whether any is inf/NaN (a device tensor, 0 or 1).
  torch::Tensor unscale(const std::vector<torch::Tensor>& grads);
  // Backs off or grows the scale after a step whose found_inf (agreed over ranks) is given.
  void update(const torch::Tensor& found_inf);
  double current() const;

 private:
  bool enabled_;
  torch::Tensor scale_, growth_tracker_;
};

}  // namespace dtune::train
