// Name -> model construction.
#include "models/registry.h"

#include <torch/utils.h>

#include "core/error.h"
#include "models/gpt.h"
#include "models/resnet.h"

namespace dtune::models {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> k = {"resnet18",  "resnet34",  "resnet50", "resnet101",
                                             "resnet152", "gpt2-tiny", "gpt2-d6",  "gpt2-d12",
                                             "gpt2-d24",  "gpt2-d36",  "gpt2-d48"};
  return k;
}

std::shared_ptr<Model> make_model(const std::string& name, const ModelOptions& o) {
  torch::manual_seed(o.seed);
  if (name.rfind("resnet", 0) == 0) {
    for (int depth : {18, 34, 50, 101, 152})
      if (name == "resnet" + std::to_string(depth))
        return std::make_shared<ResNet>(resnet_config(depth, o));
  } else if (name.rfind("gpt2-", 0) == 0) {
    return std::make_shared<Gpt>(gpt_config(name, o));
  }
  std::string names;
  for (const auto& n : model_names()) names += (names.empty() ? "" : ", ") + n;
  throw UsageError("--model " + name + ": unknown model (choose from " + names + ")");
}

}  // namespace dtune::models
