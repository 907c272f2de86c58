// Local SGD (--local-sgd-every H): ranks step on their own gradients and average their parameters
// after every H-th optimizer step, warm-up steps included (the averaging is part of training, not
// of the measurement). Only after an averaging are the ranks' parameters meant to be equal, so only
// then may the divergence guard compare them.
#pragma once

#include <torch/types.h>

#include <vector>

#include "train/reducer.h"

namespace dtune::train {

class LocalSgdSchedule {
 public:
  // `every` 0 (or one rank): off, every step leaves the ranks equal.
  LocalSgdSchedule(int every, int world) : every_(world > 1 ? every : 0) {}
  bool on() const { return every_ > 0; }
  // True when the ranks average after optimizer step `step` (0-based, warm-up included).
  bool averages_after(int step) const { return on() && (step + 1) % every_ == 0; }
  // True when the ranks' parameters are equal after step `step`.
  bool equal_after(int step) const { return !on() || averages_after(step); }

 private:
  int every_;
};

// Collective: every parameter becomes its mean over the `world` ranks. With bf16 weights the fp32
// master copy (`master`, else empty) is averaged and cast back into `params`.
void average_parameters(Reducer& reducer, int world, std::vector<torch::Tensor>& params,
                        std::vector<torch::Tensor>& master);

}  // namespace dtune::train
