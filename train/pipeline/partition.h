// Cutting a model's pieces (models/pieces.h) into K = P x V contiguous chunks of about equal cost.
// The units the cut falls between are the blocks, with the pieces of kind kFirst joined to the
// first block and kLast to the last one; or, with `ends_apart`, the kFirst pieces and the kLast
// pieces are units of their own, so that a chunk may hold the embedding or the head alone
// (Megatron-LM's account-for-embedding/loss split, torchtitan's input and output weights: a large
// vocabulary's head can cost several blocks). Each chunk holds at least one unit. The cut minimises
// the most expensive chunk (the pipeline runs at the pace of its slowest stage), by dynamic
// programming over the units. Pure: unit-tested.
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
// units than chunks.
std::vector<size_t> partition_pieces(const std::vector<PieceCost>& pieces, int chunks,
                                     bool ends_apart = false);

// "embed,h.0 | h.1,head": the chunks' piece names, the cut points as printed and stored.
std::string describe_cuts(const std::vector<models::Piece>& pieces,
                          const std::vector<size_t>& starts);

}  // namespace dtune::train
