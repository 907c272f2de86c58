// The fused bucket pack for torch tensors, host half (see fused_pack.h).
#include "train/fused_pack.h"

#include "train/fused_pack_refs.h"

namespace dtune::train {

bool fused_pack(const std::vector<torch::Tensor>& grads, const torch::Tensor& flat, float scale) {
  const auto d = detail::checked_dtype(grads, flat);
  if (!d) return false;
  if (flat.is_cuda()) return detail::fused_pack_cuda(grads, flat, scale);
  if (!flat.is_cpu()) return false;
  kernels::pack_bucket(detail::refs(grads), *d, flat.data_ptr(),
                       *detail::kernel_dtype(flat.scalar_type()), scale);
  return true;
}

bool fused_unpack(const torch::Tensor& flat, const std::vector<torch::Tensor>& dsts) {
  const auto d = detail::checked_dtype(dsts, flat);
  if (!d) return false;
  if (flat.is_cuda()) return detail::fused_unpack_cuda(flat, dsts);
  if (!flat.is_cpu()) return false;
  kernels::unpack_bucket(flat.data_ptr(), *detail::kernel_dtype(flat.scalar_type()),
                         detail::mutable_refs(dsts), *d);
  return true;
}

}  // namespace dtune::train
