// Local SGD's parameter averaging.
#include "train/local_sgd.h"

#include <torch/torch.h>

namespace dtune::train {

void average_parameters(Reducer& reducer, int world, std::vector<torch::Tensor>& params,
                        std::vector<torch::Tensor>& master) {
  torch::NoGradGuard no_grad;
  for (auto& p : master.empty() ? params : master) {
    // A reducer sums a buffer's elements in memory order, and NCCL's takes only contiguous ones:
    // a strided parameter (a channels-last convolution's weight) is averaged through a contiguous
    // copy, which goes back into it in its own layout.
    torch::Tensor flat = p.data().is_contiguous() ? p.data() : p.data().contiguous();
    reducer.allreduce_sum(flat);
    flat.div_(world);
    if (!flat.is_same(p.data())) p.data().copy_(flat);
  }
  for (size_t i = 0; i < master.size(); ++i) params[i].copy_(master[i]);
}

}  // namespace dtune::train
