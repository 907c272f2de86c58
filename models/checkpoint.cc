// Activation checkpointing as an autograd node (checkpoint.h).
#include "models/checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <chrono>

namespace dtune::models {
namespace {

// The autocast switch and dtype of one device type, as the forward saw them.
struct AutocastState {
  at::DeviceType device;
  bool enabled;
  at::ScalarType dtype;
  static AutocastState of(at::DeviceType d) {
    return {d, at::autocast::is_autocast_enabled(d), at::autocast::get_autocast_dtype(d)};
  }
};

// Puts a saved autocast state back for the recomputation, and the current one after it.
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& s) : saved_(AutocastState::of(s.device)) {
    at::autocast::set_autocast_enabled(s.device, s.enabled);
    at::autocast::set_autocast_dtype(s.device, s.dtype);
    if (s.enabled) at::autocast::increment_nesting();
    entered_ = s.enabled;
  }
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;
  ~AutocastRestore() {
    if (entered_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(saved_.device, saved_.enabled);
    at::autocast::set_autocast_dtype(saved_.device, saved_.dtype);
  }

 private:
  AutocastState saved_;
  bool entered_ = false;
};

struct CheckpointBackward : torch::autograd::Node {
  Region fn;
  torch::Tensor input;  // detached: the region's only saved tensor
  AutocastState autocast;
  std::atomic<double>* seconds;

  CheckpointBackward(Region f, const torch::Tensor& x, std::atomic<double>* s)
      : fn(std::move(f)),
        input(x.detach()),
        autocast(AutocastState::of(x.device().type())),
        seconds(s) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!grads[0].defined()) return {torch::Tensor()};
    const auto start = std::chrono::steady_clock::now();
    torch::Tensor x = input.detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastRestore as_forward(autocast);
      y = fn(x);
    }
    seconds->fetch_add(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    input = torch::Tensor();  // a second backward through this graph is not supported
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad()};
  }
  std::string name() const override { return "dtune::CheckpointBackward"; }
};

}  // namespace

torch::Tensor checkpointed(const Region& fn, const torch::Tensor& x,
                           std::atomic<double>* recompute_seconds) {
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return fn(x);
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = fn(x);
  }
  auto node = std::shared_ptr<CheckpointBackward>(new CheckpointBackward(fn, x, recompute_seconds),
                                                  torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace dtune::models
