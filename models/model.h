// The interface every dtune model implements, so binaries handle ResNets and GPTs alike: a
// forward from an input batch to logits, the training loss, a synthetic batch of the right shape,
// and the FLOP count for MFU. Models are LibTorch modules; parameter names follow their PyTorch
// twins (torchvision, nanoGPT) so that weights exported from Python load by name.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <atomic>
#include <string>
#include <utility>

#include "models/model_options.h"
#include "models/weights.h"

namespace dtune::models {

class Model : public torch::nn::Module {
 public:
  virtual std::string name() const = 0;
  // Images (N, 3, H, W) -> logits (N, classes); tokens (B, T) int64 -> logits (B, T, V).
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  // Mean cross-entropy of logits against targets ((N) classes or (B, T) next tokens).
  virtual torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& target) = 0;
  // A batch of `batch` samples of the model's input shape and matching targets, from `gen`.
  virtual std::pair<torch::Tensor, torch::Tensor> synthetic_batch(int64_t batch,
                                                                  const torch::Device& device,
                                                                  uint64_t seed) const = 0;
  virtual FlopCount flops() const = 0;
  // The fused attention kernel the last forward chose (at::_fused_sdp_choice: "flash_attention",
  // "efficient_attention", "cudnn_attention", "math"); empty for a model without attention.
  virtual std::string attention_backend() const { return {}; }
  // This rank's slices of a whole model's tensors, by name, where tensor parallelism splits this
  // model (models/tensor_parallel.h); unchanged where it does not.
  virtual TensorMap tp_slices(const TensorMap& whole) const { return whole; }
  // Seconds the backward spent recomputing checkpointed activations since the last call; resets.
  double take_recompute_seconds() { return recompute_seconds_.exchange(0); }

 protected:
  std::atomic<double> recompute_seconds_{0};
};

// The name of an at::SDPBackend value (at::_fused_sdp_choice's answer).
std::string sdp_backend_name(int64_t backend);

// Number of distinct parameter elements (tied weights counted once).
int64_t parameter_count(const torch::nn::Module& m);

}  // namespace dtune::models

namespace dtune::models {

// Converts every 4-D parameter and buffer to channels_last (NHWC) in place: convolutions then run
// in the layout tensor cores and oneDNN prefer. Inputs must be converted by the caller.
void to_channels_last(torch::nn::Module& m);

}  // namespace dtune::models
