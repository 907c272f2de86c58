// Name -> model construction.
#include "models/registry.h"

#include <torch/utils.h>

#include "core/error.h"
#include "models/gpt.h"
#include "models/resnet.h"

namespace dtune::models {

std::shared_ptr<Model> make_model(const std::string& name, const ModelOptions& o) {
  torch::manual_seed(o.seed);
  if (name.rfind("resnet", 0) == 0) {
    for (int depth : {18, 34, 50, 101, 152})
      if (name == "resnet" + std::to_string(depth))
        return std::make_shared<ResNet>(resnet_config(depth, o));
  } else if (name.rfind("gpt2-", 0) == 0) {
    return std::make_shared<Gpt>(gpt_config(name, o));
  }
  throw unknown_model(name);
}

}  // namespace dtune::models
