// The LibTorch half of each model family's entry (family.h has the rest): how a model of the family
// is built, and how it is cut into pieces.
#include "models/registry.h"

#include <torch/utils.h>

#include <string_view>

#include "core/error.h"
#include "models/family.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/model_size.h"
#include "models/pieces.h"
#include "models/resnet.h"
#include "models/safetensors.h"

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
       const GptConfig cfg = gpt_config(model, o);
       auto local = std::make_shared<Gpt>(cfg, o.tp);
       if (!o.tp || o.tp->size() == 1) return local;
       // As the Llamas below: each rank's slices of the seed's whole model.
       torch::manual_seed(o.seed);
       Gpt whole(cfg);
       TensorMap full;
       for (const auto& p : whole.named_parameters()) full[p.key()] = p.value();
       load_state(*local, local->tp_slices(full));
       return local;
     },
     [](Model& m) { return static_cast<Gpt&>(m).pieces(); }},
    {"llama",
     [](const std::string& model, const ModelOptions& o) -> std::shared_ptr<Model> {
       const LlamaConfig cfg = llama_config(model, o);
       auto local =
           std::make_shared<Llama>(cfg, o.activation_checkpoint, o.tp, o.sequence_parallel);
       if (!o.tp || o.tp->size() == 1) return local;
       // Split over a tensor-parallel group: each rank starts from its slices of the whole
       // model's initialisation (the same seed), so every layout trains the same model. The
       // whole model exists on every rank for that moment.
       torch::manual_seed(o.seed);
       Llama whole(cfg, o.activation_checkpoint);
       TensorMap full;
       for (const auto& p : whole.named_parameters()) full[p.key()] = p.value();
       load_state(*local, local->tp_slices(full));
       return local;
     },
     [](Model& m) { return static_cast<Llama&>(m).pieces(); }},
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
  const FamilyBuilder& b = builder(name);
  if (o.activation_checkpoint != ActivationCheckpoint::kNone && b.family != "llama")
    throw UsageError("--activation-checkpoint " +
                     std::string(activation_checkpoint_name(o.activation_checkpoint)) +
                     ": only the Llama family recomputes activations (--model llama3-*, hf:PATH)");
  std::shared_ptr<Model> model = b.make(name, o);
  if (!o.init_from.empty()) {
    // A tied head is the embedding: a checkpoint's lm_head.weight (nanoGPT's, or transformers'
    // when it saves both) is that tensor again.
    std::set<std::string> ignored;
    if (model_size(name, o).tied_embedding) ignored.insert("lm_head.weight");
    try {
      load_state(*model, model->tp_slices(read_checkpoint(o.init_from)), ignored);
    } catch (const UsageError& e) {
      throw UsageError("--init-from " + o.init_from + ": " + e.what());
    }
  }
  return model;
}

std::vector<Piece> model_pieces(Model& model) { return builder(model.name()).pieces(model); }

}  // namespace dtune::models
