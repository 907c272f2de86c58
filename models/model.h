// The interface every dtune model implements, so binaries handle ResNets and GPTs alike: a
// forward from an input batch to logits, the training loss, a synthetic batch of the right shape,
// and the FLOP count for MFU. Models are LibTorch modules; parameter names follow their PyTorch
// twins (torchvision, nanoGPT) so that weights exported from Python load by name.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <limits>
#include <string>
#include <utility>

namespace dtune::models {

// Per-sample cost. forward_macs is counted from the layers actually built; training_flops follows
// the model family's usual convention (`formula`, the one MFU uses), and alt_training_flops a
// second published one beside it for comparison (NaN where the family has none). See each model's
// flops().
struct FlopCount {
  double forward_macs = 0;    // multiply-accumulates of one sample's forward pass
  double training_flops = 0;  // by `formula`, per sample
  double alt_training_flops = std::numeric_limits<double>::quiet_NaN();  // by `alt_formula`
  double tokens = 1;        // tokens per sample (1 for images)
  std::string formula;      // e.g. "6N+6LCT (llm.c)", "3 x 2 x forward MACs"
  std::string alt_formula;  // e.g. "6N+12LCT (PaLM, nanoGPT)"; empty: none
};

// Options shared by the model families; each family reads the ones it has.
struct ModelOptions {
  int64_t num_classes = 1000;  // ResNet
  int64_t image_size = 224;    // ResNet input height = width
  int64_t width = 64;          // ResNet base width (64 is torchvision's)
  int64_t context = 0;         // GPT context length T (0: the family's default)
  int64_t vocab = 0;           // GPT vocabulary (0: the family's default, 50,304 for GPT-2)
  int64_t layers = 0;          // GPT transformer blocks L (0: the family's default)
  uint64_t seed = 1234;        // initialisation seed
};

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
};

// Number of distinct parameter elements (tied weights counted once).
int64_t parameter_count(const torch::nn::Module& m);

}  // namespace dtune::models

namespace dtune::models {

// Converts every 4-D parameter and buffer to channels_last (NHWC) in place: convolutions then run
// in the layout tensor cores and oneDNN prefer. Inputs must be converted by the caller.
void to_channels_last(torch::nn::Module& m);

}  // namespace dtune::models
