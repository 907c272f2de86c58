// Deferred weight gradients for the zero-bubble pipeline schedules (train/pipeline/schedule.h):
// the backward of a stage split into B, the input gradients the previous stage waits for, and W,
// the weight gradients nothing downstream waits for. As the zero-bubble paper's own code does
// (sail-sg/zero-bubble-pipeline-parallelism, WeightGradStore), the split happens at the linear
// layers, which hold nearly all of a transformer's weight-gradient work: while a store records, a
// linear layer's forward uses its weight and bias detached (so autograd's backward computes only
// the input's gradient) and keeps its input; a hook on its output keeps the output's gradient
// when the backward reaches it (B). W then computes each kept layer's weight and bias gradients,
// grad_output^T x and the sum of grad_output, and adds them to .grad. Every other parameter (the
// norms, the embeddings, a convolution) gets its gradient in B, as before.
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <map>
#include <mutex>
#include <vector>

namespace dtune::models {

class WeightGradStore {
 public:
  // The store that linear layers record into while a forward runs on this process, and the key
  // (the pipeline's chunk and micro-batch) of that forward; none outside such a forward.
  static WeightGradStore* recording();
  static int recording_key();

  // While it lives, forwards on this process record into `store` under `key`.
  class Recording {
   public:
    Recording(WeightGradStore& store, int key);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;
  };

  // From a B: one linear layer's input and output gradient, for the W of `key` (called from
  // autograd's threads: locked).
  void keep(int key, torch::Tensor input, torch::Tensor grad_output, torch::Tensor weight,
            torch::Tensor bias);
  // The W of `key`: every kept layer's weight and bias gradients added to their .grad, the kept
  // tensors released. Returns how many layers it computed.
  size_t compute(int key);
  bool empty() const;

 private:
  struct Kept {
    torch::Tensor input, grad_output, weight, bias;
  };
  mutable std::mutex mutex_;
  std::map<int, std::vector<Kept>> kept_;
};

// y = x W^T + b, as torch::nn::functional::linear; while a WeightGradStore records (and autograd
// is on and W wants a gradient), with W's and b's gradients deferred to the store's W.
torch::Tensor deferrable_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias = {});
torch::Tensor deferrable_linear(const torch::nn::Linear& l, const torch::Tensor& x);

}  // namespace dtune::models
