// A model as a chain of pieces for pipeline parallelism: each piece maps the previous piece's
// output to its own (the first takes the model's input, the last gives the logits). Pieces of kind
// kFirst go with the first pipeline stage, kLast with the last, kBlock (a transformer block, a
// residual block) are what the partition cuts between; a piece names the parameters it uses by
// their model names, so a stage's parameter set is the union of its pieces' (the GPT's tied token
// embedding is used by its first piece and its last: both end stages hold it, as Megatron-LM does).
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "models/model.h"

namespace dtune::models {

enum class PieceKind { kFirst, kBlock, kLast };

struct Piece {
  std::string name;  // "embed", "h.3", "head"; "stem", "layer2.0", "head"
  PieceKind kind = PieceKind::kBlock;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<std::string> parameters;  // full names (model.named_parameters()) this piece uses
  double forward_macs = 0;              // per sample, counted as the model's flops() counts
  // Its unit for sharded data parallelism (--shard zero3; dtune-comm --pattern fsdp's "block"
  // units, models/model_size.h): a transformer block's is itself, a ResNet residual block's is
  // its stage ("layer2"); empty: the piece's own name.
  std::string unit;
  const std::string& unit_name() const { return unit.empty() ? name : unit; }
};

// The pieces of `model`, in forward order (the whole forward is their composition): its family's
// cut (registry.cc).
std::vector<Piece> model_pieces(Model& model);

}  // namespace dtune::models
