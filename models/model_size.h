// A model's parameter count and FLOPs per sample by arithmetic from its configuration, without
// building it: `dtune-models list` answers in milliseconds instead of allocating every model (GPT-2
// d48 alone is 1.56 billion parameters, 6 GB). The same numbers the built models give
// (parameter_count, Model::flops), which tests/unit/models checks exactly for every model small
// enough to build in a unit test; the large GPTs are checked against their published counts.
#pragma once

#include <cstdint>
#include <string>

#include "models/model.h"

namespace dtune::models {

struct ModelSize {
  int64_t parameters = 0;  // distinct parameter elements (the tied GPT head counted once)
  FlopCount flops;
};

// Throws UsageError for an unknown name or bad options, as make_model does.
ModelSize model_size(const std::string& name, const ModelOptions& o);

}  // namespace dtune::models
