// Tensors as kernels/bucket_pack.h's pointer-and-count references, and the checks that decide
// whether the fused kernel applies (shared by the CPU and CUDA halves of train/fused_pack).
#pragma once

#include <torch/types.h>

#include <optional>
#include <vector>

#include "kernels/bucket_pack.h"

namespace dtune::train::detail {

inline std::optional<kernels::Dtype> kernel_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return kernels::Dtype::kFloat32;
    case torch::kHalf:
      return kernels::Dtype::kFloat16;
    case torch::kBFloat16:
      return kernels::Dtype::kBFloat16;
    default:
      return std::nullopt;
  }
}

// The tensors' common dtype when every one is contiguous, of that dtype, on `device`, and their
// element count adds up to `flat`'s (1-D, contiguous); nullopt otherwise.
inline std::optional<kernels::Dtype> checked_dtype(const std::vector<torch::Tensor>& ts,
                                                   const torch::Tensor& flat) {
  if (ts.empty() || flat.dim() != 1 || !flat.is_contiguous() || !kernel_dtype(flat.scalar_type()))
    return std::nullopt;
  const auto d = kernel_dtype(ts[0].scalar_type());
  int64_t total = 0;
  for (const auto& t : ts) {
    if (!d || t.scalar_type() != ts[0].scalar_type() || !t.is_contiguous() ||
        t.device() != flat.device())
      return std::nullopt;
    total += t.numel();
  }
  if (total != flat.numel()) return std::nullopt;
  return d;
}

inline std::vector<kernels::TensorRef> refs(const std::vector<torch::Tensor>& ts) {
  std::vector<kernels::TensorRef> out;
  for (const auto& t : ts) out.push_back({t.data_ptr(), t.numel()});
  return out;
}
inline std::vector<kernels::MutableTensorRef> mutable_refs(const std::vector<torch::Tensor>& ts) {
  std::vector<kernels::MutableTensorRef> out;
  for (const auto& t : ts) out.push_back({t.data_ptr(), t.numel()});
  return out;
}

}  // namespace dtune::train::detail
