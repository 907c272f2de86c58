// Cutting a model's pieces (models/pieces.h) into K = P x V contiguous chunks of about equal cost:
// the pieces of kind kFirst join the first block, kLast the last one, and each chunk holds at least
// one block. The cut minimises the most expensive chunk (the pipeline runs at the pace of its
// slowest stage), by dynamic programming over the blocks. Pure: unit-tested.
#pragma once

#include <string>
#include <vector>

#include "models/pieces.h"

namespace dtune::train {

struct PieceCost {
  models::PieceKind kind;
  double cost;  // forward MACs, or measured milliseconds (--partition measured)
};

// Start piece index of each of `chunks` chunks (the first is 0; chunk k holds pieces
// [starts[k], starts[k+1]) and the last runs to the end). Throws UsageError when there are fewer
// blocks than chunks.
std::vector<size_t> partition_pieces(const std::vector<PieceCost>& pieces, int chunks);

// "embed,h.0 | h.1,head": the chunks' piece names, the cut points as printed and stored.
std::string describe_cuts(const std::vector<models::Piece>& pieces,
                          const std::vector<size_t>& starts);

}  // namespace dtune::train
