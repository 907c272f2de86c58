// Fused multi-tensor gradient-bucket pack and unpack: the gradients of one bucket go into its flat
// buffer in one pass, each element scaled by 1/world and cast to the wire dtype; after the
// reduction, one pass casts the flat buffer back into each gradient. It replaces one `mul` and one
// `copy_` per parameter (two passes over memory and two dispatches per tensor).
//
// Bit-identical to those torch calls: an element is read as float, multiplied by the float
// `scale` (torch's mul by a double scalar computes in float for fp32, bf16 and fp16 tensors),
// rounded to the gradient's own dtype (mul's output dtype), then converted to the wire dtype, all
// conversions rounding to nearest even (core/float16.h). The CPU version here is the reference
// for the CUDA one (kernels/bucket_pack_cuda.h). Torch-free: tensors are pointers and counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtune::kernels {

enum class Dtype { kFloat32, kFloat16, kBFloat16 };
const char* to_string(Dtype d);
size_t dtype_size(Dtype d);

// One gradient of a bucket: `numel` contiguous elements of the bucket's gradient dtype.
struct TensorRef {
  const void* data;
  int64_t numel;
};
struct MutableTensorRef {
  void* data;
  int64_t numel;
};

// flat: (Σ numel,) in `wire`; element j of tensor k lands at Σ_{i<k} numel_i + j.
// flat[..] = wire(grad_dtype(float(src) × scale)). Runs on OpenMP threads when the bucket is
// large (> 256K elements), split by element ranges that cross tensor boundaries.
void pack_bucket(const std::vector<TensorRef>& srcs, Dtype grad_dtype, void* flat, Dtype wire,
                 float scale);
// The inverse layout: dst_k[j] = grad_dtype(flat[offset_k + j]) (no scaling).
void unpack_bucket(const void* flat, Dtype wire, const std::vector<MutableTensorRef>& dsts,
                   Dtype grad_dtype);

// Single-threaded element-by-element reference of both (what the tests compare with).
void pack_bucket_reference(const std::vector<TensorRef>& srcs, Dtype grad_dtype, void* flat,
                           Dtype wire, float scale);
void unpack_bucket_reference(const void* flat, Dtype wire,
                             const std::vector<MutableTensorRef>& dsts, Dtype grad_dtype);

}  // namespace dtune::kernels
