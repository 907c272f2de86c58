// The model names (model_names.h).
#include "models/model_names.h"

#include "models/family.h"

namespace dtune::models {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> names;
    for (const auto& f : model_families())
      names.insert(names.end(), f.models.begin(), f.models.end());
    return names;
  }();
  return k;
}

UsageError unknown_model(const std::string& name) {
  std::string names;
  for (const auto& n : model_names()) names += (names.empty() ? "" : ", ") + n;
  return UsageError("--model " + name + ": unknown model (choose from " + names +
                    ", or hf:PATH for a Hugging Face LlamaForCausalLM config.json)");
}

}  // namespace dtune::models
