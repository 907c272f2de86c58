// Shared model helpers.
#include "models/model.h"

#include <ATen/SDPBackend.h>
#include <torch/utils.h>

#include <unordered_set>

namespace dtune::models {

int64_t parameter_count(const torch::nn::Module& m) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : m.parameters(/*recurse=*/true))
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  return n;
}

std::string sdp_backend_name(int64_t backend) {
  switch (static_cast<at::SDPBackend>(backend)) {
    case at::SDPBackend::math:
      return "math";
    case at::SDPBackend::flash_attention:
      return "flash_attention";
    case at::SDPBackend::efficient_attention:
      return "efficient_attention";
    case at::SDPBackend::cudnn_attention:
      return "cudnn_attention";
    case at::SDPBackend::overrideable:
      return "overrideable";
    default:
      return "error";
  }
}

}  // namespace dtune::models

namespace dtune::models {

void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters(/*recurse=*/true))
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  for (auto& b : m.buffers(/*recurse=*/true))
    if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
}

}  // namespace dtune::models
