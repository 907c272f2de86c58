// ResNet v1.5 exactly as torchvision builds it (torchvision/models/resnet.py): 7x7 stem, four
// stages of BasicBlock (18, 34) or Bottleneck (50, 101, 152) with the stride on the bottleneck's
// 3x3 conv, adaptive average pool, fully connected head. Module names match torchvision's
// state_dict (conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, fc, ...), so its weights load.
// Options: classes, input size (any size >= 32 works: the pool is adaptive) and base width (64 is
// torchvision; smaller widths make CPU-sized variants).
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "models/model.h"
#include "models/pieces.h"
#include "models/resnet_config.h"

namespace dtune::models {

class ResNet : public Model {
 public:
  explicit ResNet(const ResNetConfig& cfg);
  std::string name() const override { return cfg_.name; }
  torch::Tensor forward(const torch::Tensor& x) override;  // (N, 3, H, W) -> (N, classes)
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& target) override;
  std::pair<torch::Tensor, torch::Tensor> synthetic_batch(int64_t batch,
                                                          const torch::Device& device,
                                                          uint64_t seed) const override;
  FlopCount flops() const override;
  // torchvision's initialisation: kaiming_normal_(fan_out, relu) for convs, BN weight 1 and bias 0,
  // PyTorch's default Linear init for fc. Deterministic for the global seed in effect.
  void reset_parameters();
  // Pipeline split (models/pieces.h): stem (conv1, bn1, max pool), one piece per residual block,
  // head (average pool, fc).
  std::vector<Piece> pieces();

 private:
  // conv1, bn1, relu and max pool; a floating input is cast to the weights' dtype first (the
  // images are float32 from every data source; with --weights-dtype bf16 conv1 is bf16).
  torch::Tensor stem(const torch::Tensor& input);
  ResNetConfig cfg_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<torch::nn::ModuleList> stages_;  // layer1..layer4: residual blocks
  torch::nn::Linear fc_{nullptr};
};

}  // namespace dtune::models
