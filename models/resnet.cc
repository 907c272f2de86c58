// torchvision's ResNet in LibTorch. Shapes in comments are (N, C, H, W).
#include "models/resnet.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include <cmath>

#include "core/error.h"

namespace dtune::models {
namespace {

namespace F = torch::nn::functional;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// Output size of a conv or pool along one dimension (PyTorch's formula, floor mode).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d = 1) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// MACs of a conv at input (h, w), read from the module's own options; updates h and w.
double conv_macs(const torch::nn::Conv2dImpl& c, int64_t& h, int64_t& w) {
  const auto& o = c.options;
  const auto& pad = std::get<torch::ExpandingArray<2>>(o.padding());
  const int64_t oh =
      out_size(h, (*o.kernel_size())[0], (*o.stride())[0], (*pad)[0], (*o.dilation())[0]);
  const int64_t ow =
      out_size(w, (*o.kernel_size())[1], (*o.stride())[1], (*pad)[1], (*o.dilation())[1]);
  h = oh;
  w = ow;
  return static_cast<double>(oh * ow) * static_cast<double>(o.out_channels()) *
         static_cast<double>(o.in_channels() / o.groups()) *
         static_cast<double>((*o.kernel_size())[0] * (*o.kernel_size())[1]);
}

// A residual block: forward plus MAC counting that follows the block's own convs. The shortcut
// is the identity, or a strided 1x1 conv + BN ("downsample") when the shape changes.
class Block : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  virtual double macs(int64_t& h, int64_t& w) const = 0;

 protected:
  void add_downsample_if_needed(int64_t inplanes, int64_t outplanes, int64_t stride) {
    if (stride == 1 && inplanes == outplanes) return;
    downsample_ =
        register_module("downsample", torch::nn::Sequential(conv(inplanes, outplanes, 1, stride, 0),
                                                            torch::nn::BatchNorm2d(outplanes)));
    down_conv_ = downsample_->ptr<torch::nn::Conv2dImpl>(0);
  }
  torch::Tensor shortcut(const torch::Tensor& x) {
    return downsample_ ? downsample_->forward(x) : x;
  }
  // The shortcut's MACs at the block's input size (which the main path then updates).
  double shortcut_macs(int64_t h, int64_t w) const {
    return down_conv_ ? conv_macs(*down_conv_, h, w) : 0.0;
  }

 private:
  torch::nn::Sequential downsample_{nullptr};
  std::shared_ptr<torch::nn::Conv2dImpl> down_conv_;
};

// BasicBlock (ResNet-18/34): 3x3 (stride) -> 3x3, expansion 1.
class BasicBlock : public Block {
 public:
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", conv(inplanes, planes, 3, stride, 1));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1, 1));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(planes));
    add_downsample_if_needed(inplanes, planes, stride);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor out = F::relu(bn1_(conv1_(x)));
    out = bn2_(conv2_(out));
    out += shortcut(x);
    return F::relu(out);
  }
  double macs(int64_t& h, int64_t& w) const override {
    double m = shortcut_macs(h, w);
    m += conv_macs(*conv1_, h, w);
    return m + conv_macs(*conv2_, h, w);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
};

// Bottleneck (ResNet-50/101/152, v1.5): 1x1 -> 3x3 (stride) -> 1x1, expansion 4.
class Bottleneck : public Block {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride) {
    const int64_t width = planes;  // groups 1, base_width 64: int(planes * 64 / 64) * 1
    conv1_ = register_module("conv1", conv(inplanes, width, 1, 1, 0));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(width));
    conv2_ = register_module("conv2", conv(width, width, 3, stride, 1));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(width));
    conv3_ = register_module("conv3", conv(width, planes * kExpansion, 1, 1, 0));
    bn3_ = register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion));
    add_downsample_if_needed(inplanes, planes * kExpansion, stride);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor out = F::relu(bn1_(conv1_(x)));
    out = F::relu(bn2_(conv2_(out)));
    out = bn3_(conv3_(out));
    out += shortcut(x);
    return F::relu(out);
  }
  double macs(int64_t& h, int64_t& w) const override {
    double m = shortcut_macs(h, w);
    m += conv_macs(*conv1_, h, w);
    m += conv_macs(*conv2_, h, w);
    return m + conv_macs(*conv3_, h, w);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
};

}  // namespace

ResNet::ResNet(const ResNetConfig& cfg) : cfg_(cfg) {
  const int64_t w = cfg.width;
  const int64_t expansion = cfg.block == BlockKind::kBasic ? 1 : Bottleneck::kExpansion;
  conv1_ = register_module("conv1", conv(3, w, 7, 2, 3));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(w));
  int64_t inplanes = w;
  for (size_t s = 0; s < 4; ++s) {
    const int64_t planes = w << s;
    torch::nn::ModuleList stage;
    for (int64_t b = 0; b < cfg.layers[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      if (cfg.block == BlockKind::kBasic)
        stage->push_back(std::make_shared<BasicBlock>(inplanes, planes, stride));
      else
        stage->push_back(std::make_shared<Bottleneck>(inplanes, planes, stride));
      inplanes = planes * expansion;
    }
    stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  fc_ = register_module("fc", torch::nn::Linear(inplanes, cfg.num_classes));
  reset_parameters();
}

void ResNet::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
  fc_->reset_parameters();  // PyTorch's default Linear init, as torchvision leaves it
}

torch::Tensor ResNet::stem(const torch::Tensor& input) {
  const auto dtype = conv1_->weight.scalar_type();
  const torch::Tensor in = input.is_floating_point() ? input.to(dtype) : input;
  torch::Tensor x = F::relu(bn1_(conv1_(in)));                               // (N, w, H/2, W/2)
  return F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1));  // (N, w, H/4, W/4)
}

torch::Tensor ResNet::forward(const torch::Tensor& input) {
  torch::Tensor x = stem(input);
  for (auto& stage : stages_)
    for (const auto& block : *stage) x = block->as<Block>()->forward(x);
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);  // (N, 8w·exp)
  return fc_(x);                                                                 // (N, classes)
}

std::vector<Piece> ResNet::pieces() {
  auto names = [this](const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& p : named_parameters())
      if (p.key().starts_with(prefix)) out.push_back(p.key());
    return out;
  };
  std::vector<Piece> out;
  int64_t h = cfg_.image_size, w = cfg_.image_size;
  const double stem_macs = conv_macs(*conv1_, h, w);
  h = out_size(h, 3, 2, 1);
  w = out_size(w, 3, 2, 1);
  Piece first{"stem", PieceKind::kFirst,
              [this](const torch::Tensor& input) { return this->stem(input); }, names("conv1."),
              stem_macs};
  for (const auto& n : names("bn1.")) first.parameters.push_back(n);
  out.push_back(std::move(first));
  for (size_t s = 0; s < stages_.size(); ++s)
    for (size_t b = 0; b < stages_[s]->size(); ++b) {
      auto block = stages_[s]->ptr(b);
      const std::string name = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      const double macs = block->as<Block>()->macs(h, w);
      out.push_back({name, PieceKind::kBlock,
                     [block](const torch::Tensor& x) { return block->as<Block>()->forward(x); },
                     names(name + "."), macs, "layer" + std::to_string(s + 1)});
    }
  out.push_back({"head", PieceKind::kLast,
                 [this](const torch::Tensor& x) {
                   return fc_(
                       F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1));
                 },
                 names("fc."),
                 static_cast<double>(fc_->options.in_features() * fc_->options.out_features())});
  return out;
}

torch::Tensor ResNet::loss(const torch::Tensor& logits, const torch::Tensor& target) {
  return F::cross_entropy(logits.to(torch::kFloat), target);
}

std::pair<torch::Tensor, torch::Tensor> ResNet::synthetic_batch(int64_t batch,
                                                                const torch::Device& device,
                                                                uint64_t seed) const {
  auto gen = at::detail::createCPUGenerator(seed);
  torch::Tensor x = at::randn({batch, 3, cfg_.image_size, cfg_.image_size}, gen, torch::kFloat);
  torch::Tensor y = at::randint(cfg_.num_classes, {batch}, gen, torch::kLong);
  return {x.to(device), y.to(device)};
}

FlopCount ResNet::flops() const {
  // Convolutions and the head, as torchvision's published GMACs count them (BN, ReLU, pooling and
  // the residual additions are left out: they are a fraction of a percent).
  int64_t h = cfg_.image_size, w = cfg_.image_size;
  double macs = conv_macs(*conv1_, h, w);
  h = out_size(h, 3, 2, 1);  // max pool
  w = out_size(w, 3, 2, 1);
  for (const auto& stage : stages_)
    for (const auto& block : *stage) macs += block->as<Block>()->macs(h, w);
  macs += static_cast<double>(fc_->options.in_features() * fc_->options.out_features());
  FlopCount f;
  f.forward_macs = macs;
  f.training_flops = 3.0 * 2.0 * macs;
  f.formula = "3 x 2 x forward MACs (forward + backward ~ 3 forwards; 1 MAC = 2 FLOPs)";
  return f;
}

}  // namespace dtune::models
