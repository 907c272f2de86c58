// Parsing and naming of the model options' switches (model_options.h).
#include "models/model_options.h"

#include "core/error.h"

namespace dtune::models {

const char* activation_checkpoint_name(ActivationCheckpoint a) {
  switch (a) {
    case ActivationCheckpoint::kFull:
      return "full";
    case ActivationCheckpoint::kSelective:
      return "selective";
    case ActivationCheckpoint::kNone:
      break;
  }
  return "none";
}

ActivationCheckpoint parse_activation_checkpoint(const std::string& s) {
  if (s == "none") return ActivationCheckpoint::kNone;
  if (s == "full") return ActivationCheckpoint::kFull;
  if (s == "selective") return ActivationCheckpoint::kSelective;
  throw UsageError("--activation-checkpoint " + s + ": choose none, full or selective");
}

}  // namespace dtune::models
