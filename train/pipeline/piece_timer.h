// --partition measured: each piece's forward + backward time on this device at the run's batch,
// timed once after one untimed pass (the first call of an operator pays its set-up), for the
// partition to balance instead of counted FLOPs.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "models/pieces.h"
#include "train/config.h"

namespace dtune::train {

// Milliseconds per piece, in order. Leaves no gradients behind.
std::vector<double> time_pieces(models::Model& model, const std::vector<models::Piece>& pieces,
                                int64_t batch, const Options& o, const torch::Device& device);

}  // namespace dtune::train
