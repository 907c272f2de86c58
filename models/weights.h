// Tensors to and from files that Python reads and writes with plain torch.save / torch.load (a
// dict of name -> tensor in PyTorch's zip format, through torch::pickle_save / pickle_load): no
// custom parser on either side. Used to load weights exported from a model's PyTorch twin and to
// hand results back for comparison.
#pragma once

#include <torch/nn/module.h>

#include <map>
#include <set>
#include <string>

namespace dtune::models {

using TensorMap = std::map<std::string, torch::Tensor>;

TensorMap read_tensors(const std::string& path);
void write_tensors(const std::string& path, const TensorMap& tensors);

// Copies every parameter and buffer of `m` from `tensors` by its dotted name (as state_dict names
// it). Throws UsageError naming the first missing key or shape mismatch, and any key that matches
// nothing unless it is in `ignored` (e.g. nanoGPT's lm_head.weight, tied to the embedding).
void load_state(torch::nn::Module& m, const TensorMap& tensors,
                const std::set<std::string>& ignored = {});

}  // namespace dtune::models
