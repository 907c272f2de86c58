// Dispatch to each model family's own split (the blocks are private to its file).
#include "models/pieces.h"

#include "core/error.h"
#include "models/gpt.h"
#include "models/resnet.h"

namespace dtune::models {

std::vector<Piece> model_pieces(Model& model) {
  if (auto* g = dynamic_cast<Gpt*>(&model)) return g->pieces();
  if (auto* r = dynamic_cast<ResNet*>(&model)) return r->pieces();
  throw UsageError("--pipeline-stages: " + model.name() + " has no pipeline split (GPT, ResNet)");
}

}  // namespace dtune::models
