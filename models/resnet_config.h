// The ResNet family's shapes by depth, without torch: what resnet.h builds and what model_size.h
// counts from (so that binaries without LibTorch know a ResNet's size).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_options.h"

namespace dtune::models {

enum class BlockKind { kBasic, kBottleneck };

struct ResNetConfig {
  BlockKind block = BlockKind::kBasic;
  std::vector<int64_t> layers = {2, 2, 2, 2};
  int64_t num_classes = 1000;
  int64_t image_size = 224;
  int64_t width = 64;
  std::string name = "resnet18";
};

// resnet18/34/50/101/152 by depth; throws UsageError for another depth.
ResNetConfig resnet_config(int depth, const ModelOptions& o);
// By --model name: resnet18, ..., resnet152 (family.h lists them).
ResNetConfig resnet_config(const std::string& model, const ModelOptions& o);

}  // namespace dtune::models
