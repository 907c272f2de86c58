// The names every binary's --model accepts, without torch: the registry (registry.h) builds them,
// model_size.h counts them, and binaries without LibTorch (dtune-comm --pattern fsdp) check them.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"

namespace dtune::models {

// Every family's models (family.h): resnet18/34/50/101/152 and gpt2-tiny/d6/d12/d24/d36/d48, in
// `dtune-models list` order.
const std::vector<std::string>& model_names();
// The UsageError for a name that is none of them: "--model NAME: unknown model (choose from ...)".
UsageError unknown_model(const std::string& name);

}  // namespace dtune::models
