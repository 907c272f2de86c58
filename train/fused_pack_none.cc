// A build without CUDA: CUDA tensors cannot occur; callers fall back to torch ops if they do.
#include "train/fused_pack.h"

namespace dtune::train::detail {

bool fused_pack_cuda(const std::vector<torch::Tensor>&, const torch::Tensor&, float) {
  return false;
}
bool fused_unpack_cuda(const torch::Tensor&, const std::vector<torch::Tensor>&) { return false; }

}  // namespace dtune::train::detail
