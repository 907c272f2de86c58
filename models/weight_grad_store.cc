// The deferred weight gradients of linear layers.
#include "models/weight_grad_store.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>

namespace dtune::models {
namespace {

// One pipeline per process, whose forwards run on its main thread.
WeightGradStore* g_store = nullptr;
int g_key = -1;

}  // namespace

WeightGradStore* WeightGradStore::recording() { return g_store; }
int WeightGradStore::recording_key() { return g_key; }

WeightGradStore::Recording::Recording(WeightGradStore& store, int key) {
  g_store = &store;
  g_key = key;
}

WeightGradStore::Recording::~Recording() {
  g_store = nullptr;
  g_key = -1;
}

void WeightGradStore::keep(int key, torch::Tensor input, torch::Tensor grad_output,
                           torch::Tensor weight, torch::Tensor bias) {
  std::lock_guard<std::mutex> lock(mutex_);
  kept_[key].push_back(
      {std::move(input), std::move(grad_output), std::move(weight), std::move(bias)});
}

size_t WeightGradStore::compute(int key) {
  std::vector<Kept> layers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kept_.find(key);
    if (it == kept_.end()) return 0;
    layers = std::move(it->second);
    kept_.erase(it);
  }
  torch::NoGradGuard no_grad;
  auto add = [](torch::Tensor& param, const torch::Tensor& g) {
    torch::Tensor& grad = param.mutable_grad();
    if (grad.defined())
      grad.add_(g);
    else
      grad = g.to(param.scalar_type()).contiguous();
  };
  for (Kept& k : layers) {
    // The products in the dtype the forward computed in (autocast's, when it cast), as autograd's
    // linear backward does; the gradients in the parameters' own dtype.
    const int64_t out = k.grad_output.size(-1), in = k.input.size(-1);
    const torch::Tensor gy = k.grad_output.reshape({-1, out});
    const torch::Tensor x = k.input.reshape({-1, in}).to(gy.scalar_type());
    add(k.weight, gy.t().mm(x));
    if (k.bias.defined()) add(k.bias, gy.sum(0));
  }
  return layers.size();
}

bool WeightGradStore::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.empty();
}

torch::Tensor deferrable_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias) {
  WeightGradStore* store = WeightGradStore::recording();
  if (!store || !torch::GradMode::is_enabled() || !weight.requires_grad() || !x.requires_grad())
    return torch::nn::functional::linear(x, weight, bias);
  torch::Tensor y =
      torch::nn::functional::linear(x, weight.detach(), bias.defined() ? bias.detach() : bias);
  // The input as the matmul saw it: under autocast, cast as autocast casts it (kept once, in the
  // forward's dtype, instead of the fp32 copy).
  torch::Tensor input = x.detach();
  if (at::autocast::is_autocast_enabled(x.device().type()) && input.is_floating_point())
    input = input.to(at::autocast::get_autocast_dtype(x.device().type()));
  const int key = WeightGradStore::recording_key();
  y.register_hook([store, key, input, weight, bias](const torch::Tensor& grad_output) {
    store->keep(key, input, grad_output, weight, bias);
  });
  return y;
}

torch::Tensor deferrable_linear(const torch::nn::Linear& l, const torch::Tensor& x) {
  return deferrable_linear(x, l->weight, l->bias);
}

}  // namespace dtune::models
