// The fused bucket pack and unpack on a CUDA device: one kernel launch per bucket (up to
// kMaxTensorsPerLaunch gradients per launch; a bucket with more takes one launch per that many),
// on the given stream, asynchronous. The same element values as the host version
// (kernels/bucket_pack.h), which is its reference. Only built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/bucket_pack.h"

namespace dtune::kernels {

// The table of tensors travels in the kernel's parameters (CUDA >= 12.1 allows 32 KiB).
inline constexpr int kMaxTensorsPerLaunch = 512;

// Pointers are device pointers; flat: (Σ numel,) in `wire`.
void pack_bucket_cuda(const std::vector<TensorRef>& srcs, Dtype grad_dtype, void* flat, Dtype wire,
                      float scale, cudaStream_t stream);
void unpack_bucket_cuda(const void* flat, Dtype wire, const std::vector<MutableTensorRef>& dsts,
                        Dtype grad_dtype, cudaStream_t stream);

// Whether this process sees a CUDA device (false without a driver).
bool has_cuda_device();

}  // namespace dtune::kernels
