// The model names (model_names.h).
#include "models/model_names.h"

namespace dtune::models {

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> k = {"resnet18",  "resnet34",  "resnet50", "resnet101",
                                             "resnet152", "gpt2-tiny", "gpt2-d6",  "gpt2-d12",
                                             "gpt2-d24",  "gpt2-d36",  "gpt2-d48"};
  return k;
}

UsageError unknown_model(const std::string& name) {
  std::string names;
  for (const auto& n : model_names()) names += (names.empty() ? "" : ", ") + n;
  return UsageError("--model " + name + ": unknown model (choose from " + names + ")");
}

}  // namespace dtune::models
