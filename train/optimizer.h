// Optimizers through PyTorch's fused kernels (at::_fused_sgd_, at::_fused_adamw_: one kernel over
// all parameters, on CPU and CUDA, what torch.optim uses with fused=True), with the hyper-
// parameters dtune uses: SGD with momentum 0.9, AdamW with betas (0.9, 0.999), eps 1e-8, weight
// decay 0.01. LibTorch's torch::optim has only per-parameter loops; the tests check the fused
// versions against it.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/config.h"

namespace dtune::train {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // Updates every parameter that has a gradient.
  virtual void step() = 0;
  // Drops the gradients (set to none), as zero_grad(set_to_none=True) does.
  void zero_grad();
  // Bytes of state it holds between steps (momentum; AdamW's two moments and step counts): 0
  // before the first step creates it.
  virtual int64_t state_bytes() const = 0;

 protected:
  explicit Optimizer(std::vector<torch::Tensor> params) : params_(std::move(params)) {}
  // The parameters that have a gradient, and their gradients (the fused kernels' lists).
  void with_grads(std::vector<torch::Tensor>& p, std::vector<torch::Tensor>& g) const;
  std::vector<torch::Tensor> params_;
};

std::unique_ptr<Optimizer> make_fused_optimizer(OptimizerKind kind,
                                                std::vector<torch::Tensor> params, double lr);

// --weights-dtype bf16: the fp32 master copy of `params` (leaves that take gradients, in the same
// order), which the optimizer updates instead of the bf16 weights.
std::vector<torch::Tensor> make_master_copy(const std::vector<torch::Tensor>& params);
// The optimizer's step. With a master copy (`master` not empty, the optimizer's parameters): the
// weights' gradients cast to fp32 onto it first, and after the step the copy cast back into the
// weights; so the weights are always the master copy rounded to bf16.
void optimizer_step(Optimizer& optimizer, std::vector<torch::Tensor>& params,
                    std::vector<torch::Tensor>& master);

}  // namespace dtune::train
