// Local SGD's parameter averaging.
#include "train/local_sgd.h"

#include <torch/torch.h>

namespace dtune::train {

void average_parameters(Reducer& reducer, int world, std::vector<torch::Tensor>& params,
                        std::vector<torch::Tensor>& master) {
  torch::NoGradGuard no_grad;
  for (auto& p : master.empty() ? params : master) {
    reducer.allreduce_sum(p.data());
    p.data().div_(world);
  }
  for (size_t i = 0; i < master.size(); ++i) params[i].copy_(master[i]);
}

}  // namespace dtune::train
