// The model families' entries.
#include "models/family.h"

#include "models/gpt_config.h"
#include "models/model_names.h"
#include "models/resnet_config.h"

namespace dtune::models {

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> k = {
      {"resnet",
       {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"},
       false,
       false,
       [](const std::string& model, const ModelOptions& o) {
         return resnet_size(resnet_config(model, o));
       }},
      {"gpt2",
       {"gpt2-tiny", "gpt2-d6", "gpt2-d12", "gpt2-d24", "gpt2-d36", "gpt2-d48"},
       true,
       true,
       [](const std::string& model, const ModelOptions& o) {
         return gpt_size(gpt_config(model, o));
       }},
  };
  return k;
}

const ModelFamily& model_family(const std::string& model) {
  for (const auto& f : model_families())
    for (const auto& m : f.models)
      if (m == model) return f;
  throw unknown_model(model);
}

}  // namespace dtune::models
