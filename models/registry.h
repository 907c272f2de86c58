// Models by name, for every binary's --model NAME: resnet18/34/50/101/152 and gpt2-d6/d12/d24/
// d36/d48/tiny. Initialisation is deterministic for ModelOptions::seed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/model_names.h"

namespace dtune::models {

// Throws UsageError listing the names for an unknown one.
std::shared_ptr<Model> make_model(const std::string& name, const ModelOptions& options);

}  // namespace dtune::models
