// The LibTorch half of each model family's entry (family.h has the rest): how a model of the family
// is built, and how it is cut into pieces.
#include "models/registry.h"

#include <torch/utils.h>

#include <string_view>

#include "core/error.h"
#include "models/family.h"
#include "models/gpt.h"
#include "models/pieces.h"
#include "models/resnet.h"

namespace dtune::models {
namespace {

struct FamilyBuilder {
  std::string_view family;  // ModelFamily::name
  std::shared_ptr<Model> (*make)(const std::string& model, const ModelOptions& o);
  // The model is of this family (the registry found it by its name).
  std::vector<Piece> (*pieces)(Model& model);
};

const FamilyBuilder kBuilders[] = {
    {"resnet",
     [](const std::string& model, const ModelOptions& o) -> std::shared_ptr<Model> {
       return std::make_shared<ResNet>(resnet_config(model, o));
     },
     [](Model& m) { return static_cast<ResNet&>(m).pieces(); }},
    {"gpt2",
     [](const std::string& model, const ModelOptions& o) -> std::shared_ptr<Model> {
       return std::make_shared<Gpt>(gpt_config(model, o));
     },
     [](Model& m) { return static_cast<Gpt&>(m).pieces(); }},
};

const FamilyBuilder& builder(const std::string& model) {
  const ModelFamily& f = model_family(model);  // throws for an unknown name
  for (const auto& b : kBuilders)
    if (b.family == f.name) return b;
  throw Error("model family " + std::string(f.name) + " has no builder in models/registry.cc");
}

}  // namespace

std::shared_ptr<Model> make_model(const std::string& name, const ModelOptions& o) {
  torch::manual_seed(o.seed);
  return builder(name).make(name, o);
}

std::vector<Piece> model_pieces(Model& model) { return builder(model.name()).pieces(model); }

}  // namespace dtune::models
