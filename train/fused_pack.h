// LibTorch side of the fused gradient-bucket pack (kernels/bucket_pack.h): tensors in, one pass
// per call out. On a CPU tensor the OpenMP kernel runs; on a CUDA tensor the CUDA kernel, on the
// current stream, in a build with CUDA. Bit-identical to `flat.copy_(grad.mul(scale))` per tensor
// and `grad.copy_(flat)` back (the kernels' header says why).
#pragma once

#include <torch/types.h>

#include <vector>

namespace dtune::train {

// Packs `grads` (contiguous, one dtype among float32, float16, bfloat16, on flat's device) into
// the contiguous 1-D `flat` (Σ numel elements, float32/float16/bfloat16), each element times
// `scale`. Returns false, having done nothing, where the fused kernel does not apply (another
// dtype, a non-contiguous tensor, a CUDA tensor in a build without CUDA): the caller falls back.
bool fused_pack(const std::vector<torch::Tensor>& grads, const torch::Tensor& flat, float scale);
// The inverse: dsts[k] = flat[offset_k ..] cast to dsts' dtype. Same conditions.
bool fused_unpack(const torch::Tensor& flat, const std::vector<torch::Tensor>& dsts);

namespace detail {
// The CUDA half (fused_pack_cuda.cc; fused_pack_none.cc returns false in a build without CUDA).
bool fused_pack_cuda(const std::vector<torch::Tensor>& grads, const torch::Tensor& flat,
                     float scale);
bool fused_unpack_cuda(const torch::Tensor& flat, const std::vector<torch::Tensor>& dsts);
}  // namespace detail

}  // namespace dtune::train
