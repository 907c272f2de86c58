// The model families, one entry each (family.cc): the --model names a family answers to, whether
// it is a transformer over token sequences (--context, --vocab and --layers shape it), and its size
// by arithmetic (model_size.h). Torch-free: binaries without LibTorch read it. The LibTorch half of
// an entry, the construction and the cut into pieces, is the family's line in registry.cc. A new
// family is its entry here, its line there, and its model and configuration files; nothing else
// dispatches on a model's name or type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/model_size.h"

namespace dtune::models {

struct ModelFamily {
  std::string_view name;            // "resnet", "gpt2", "llama"
  std::vector<std::string> models;  // its --model names, in `dtune-models list` order
  bool sequence = false;            // tokens in, tokens out: --context, --vocab, --layers apply
  ModelSize (*size)(const std::string& model, const ModelOptions& o) = nullptr;
  std::string_view prefix;  // names that start with it are the family's too ("hf:" for llama)
};

// Every family, in `dtune-models list` order.
const std::vector<ModelFamily>& model_families();
// The family whose models include `model` (or whose prefix it starts with); throws unknown_model's
// UsageError otherwise.
const ModelFamily& model_family(const std::string& model);

}  // namespace dtune::models
