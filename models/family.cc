// The model families' entries.
#include "models/family.h"

#include "models/gpt_config.h"
#include "models/llama_config.h"
#include "models/model_names.h"
#include "models/resnet_config.h"

namespace dtune::models {

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> k = {
      {"resnet",
       {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"},
       false,
       [](const std::string& model, const ModelOptions& o) {
         return resnet_size(resnet_config(model, o));
       },
       {}},
      {"gpt2",
       {"gpt2-tiny", "gpt2-d6", "gpt2-d12", "gpt2-d24", "gpt2-d36", "gpt2-d48"},
       true,
       [](const std::string& model, const ModelOptions& o) {
         return gpt_size(gpt_config(model, o));
       },
       {}},
      {"llama",
       {"llama3-tiny", "llama3.2-1b", "llama3.2-3b", "llama3.1-8b", "llama3.1-70b",
        "llama3.1-405b"},
       true,
       [](const std::string& model, const ModelOptions& o) {
         return llama_size(llama_config(model, o));
       },
       "hf:"},
  };
  return k;
}

const ModelFamily& model_family(const std::string& model) {
  for (const auto& f : model_families()) {
    for (const auto& m : f.models)
      if (m == model) return f;
    if (!f.prefix.empty() && model.starts_with(f.prefix)) return f;
  }
  throw unknown_model(model);
}

}  // namespace dtune::models
