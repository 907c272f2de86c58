// Fused SGD and AdamW.
#include "train/optimizer.h"

#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#include <torch/autograd.h>

namespace dtune::train {

void Optimizer::with_grads(std::vector<torch::Tensor>& p, std::vector<torch::Tensor>& g) const {
  for (const auto& t : params_)
    if (t.grad().defined()) {
      p.push_back(t);
      g.push_back(t.grad());
    }
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

namespace {

int64_t bytes_of(const std::vector<torch::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += static_cast<int64_t>(t.nbytes());
  return n;
}

class FusedSgd final : public Optimizer {
 public:
  FusedSgd(std::vector<torch::Tensor> params, double lr) : Optimizer(std::move(params)), lr_(lr) {}
  std::string name() const override { return "sgd (fused, momentum 0.9)"; }
  int64_t state_bytes() const override { return bytes_of(momentum_); }
  void step() override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> p, g;
    with_grads(p, g);
    if (momentum_.empty())
      for (auto& t : p) momentum_.push_back(torch::zeros_like(t));
    // is_first_step: the momentum buffer starts as the gradient itself (torch.optim.SGD).
    at::_fused_sgd_(p, g, momentum_, /*weight_decay=*/0.0, /*momentum=*/0.9, lr_, /*dampening=*/0.0,
                    /*nesterov=*/false, /*maximize=*/false, /*is_first_step=*/first_);
    first_ = false;
  }

 private:
  double lr_;
  bool first_ = true;
  std::vector<torch::Tensor> momentum_;
};

class FusedAdamW final : public Optimizer {
 public:
  FusedAdamW(std::vector<torch::Tensor> params, double lr)
      : Optimizer(std::move(params)), lr_(lr) {}
  std::string name() const override { return "adamw (fused)"; }
  int64_t state_bytes() const override {
    return bytes_of(exp_avg_) + bytes_of(exp_avg_sq_) + bytes_of(steps_);
  }
  void step() override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> p, g;
    with_grads(p, g);
    if (exp_avg_.empty()) {
      for (auto& t : p) {
        exp_avg_.push_back(torch::zeros_like(t, at::MemoryFormat::Preserve));
        exp_avg_sq_.push_back(torch::zeros_like(t, at::MemoryFormat::Preserve));
        steps_.push_back(torch::zeros({}, t.options().dtype(torch::kFloat)));
      }
    }
    // The kernel reads the step count for bias correction; torch.optim increments it first.
    for (auto& s : steps_) s.add_(1);
    at::_fused_adamw_(p, g, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps_, lr_, 0.9, 0.999,
                      /*weight_decay=*/0.01, /*eps=*/1e-8, /*amsgrad=*/false, /*maximize=*/false);
  }

 private:
  double lr_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, steps_;
};

}  // namespace

std::unique_ptr<Optimizer> make_fused_optimizer(OptimizerKind kind,
                                                std::vector<torch::Tensor> params, double lr) {
  if (kind == OptimizerKind::kAdamw) return std::make_unique<FusedAdamW>(std::move(params), lr);
  return std::make_unique<FusedSgd>(std::move(params), lr);
}

std::vector<torch::Tensor> make_master_copy(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> master;
  for (const auto& p : params) master.push_back(p.detach().to(torch::kFloat).requires_grad_(true));
  return master;
}

void optimizer_step(Optimizer& optimizer, std::vector<torch::Tensor>& params,
                    std::vector<torch::Tensor>& master) {
  if (master.empty()) {
    optimizer.step();
    return;
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].grad().defined()) master[i].mutable_grad() = params[i].grad().to(torch::kFloat);
  optimizer.step();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(master[i]);
}

}  // namespace dtune::train
