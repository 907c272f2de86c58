// ResNet configurations by depth (resnet_config.h).
#include "models/resnet_config.h"

#include "core/error.h"

namespace dtune::models {

ResNetConfig resnet_config(int depth, const ModelOptions& o) {
  ResNetConfig c;
  switch (depth) {
    case 18:
      c.block = BlockKind::kBasic;
      c.layers = {2, 2, 2, 2};
      break;
    case 34:
      c.block = BlockKind::kBasic;
      c.layers = {3, 4, 6, 3};
      break;
    case 50:
      c.block = BlockKind::kBottleneck;
      c.layers = {3, 4, 6, 3};
      break;
    case 101:
      c.block = BlockKind::kBottleneck;
      c.layers = {3, 4, 23, 3};
      break;
    case 152:
      c.block = BlockKind::kBottleneck;
      c.layers = {3, 8, 36, 3};
      break;
    default:
      throw UsageError("resnet" + std::to_string(depth) + ": depth must be 18, 34, 50, 101 or 152");
  }
  if (o.num_classes < 1) throw UsageError("--num-classes must be at least 1");
  if (o.image_size < 32)
    throw UsageError("--image-size " + std::to_string(o.image_size) + ": ResNet needs at least 32");
  if (o.width < 1) throw UsageError("--width must be at least 1");
  c.num_classes = o.num_classes;
  c.image_size = o.image_size;
  c.width = o.width;
  c.name = "resnet" + std::to_string(depth);
  return c;
}

ResNetConfig resnet_config(const std::string& model, const ModelOptions& o) {
  return resnet_config(std::stoi(model.substr(std::string("resnet").size())), o);
}

}  // namespace dtune::models
