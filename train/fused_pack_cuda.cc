// The fused bucket pack for torch tensors on a GPU: the CUDA kernel on the current stream, so it
// is ordered with the autograd kernels that produced the gradients (see fused_pack.h).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/bucket_pack_cuda.h"
#include "train/fused_pack.h"
#include "train/fused_pack_refs.h"

namespace dtune::train::detail {

bool fused_pack_cuda(const std::vector<torch::Tensor>& grads, const torch::Tensor& flat,
                     float scale) {
  const c10::cuda::CUDAGuard guard(flat.device());
  kernels::pack_bucket_cuda(refs(grads), *kernel_dtype(grads[0].scalar_type()), flat.data_ptr(),
                            *kernel_dtype(flat.scalar_type()), scale,
                            c10::cuda::getCurrentCUDAStream(flat.device().index()).stream());
  return true;
}

bool fused_unpack_cuda(const torch::Tensor& flat, const std::vector<torch::Tensor>& dsts) {
  const c10::cuda::CUDAGuard guard(flat.device());
  kernels::unpack_bucket_cuda(flat.data_ptr(), *kernel_dtype(flat.scalar_type()),
                              mutable_refs(dsts), *kernel_dtype(dsts[0].scalar_type()),
                              c10::cuda::getCurrentCUDAStream(flat.device().index()).stream());
  return true;
}

}  // namespace dtune::train::detail
