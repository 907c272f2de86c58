// The fused bucket pack and unpack on a CUDA device (see bucket_pack_cuda.h). Grid: x strides
// over one tensor's elements, y picks the tensor, so one launch covers the whole bucket.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda/cuda_error.h"
#include "kernels/bucket_pack_cuda.h"

namespace dtune::kernels {
namespace {

struct Table {
  const void* src[kMaxTensorsPerLaunch];  // pack: gradients; unpack: flat + offset
  void* dst[kMaxTensorsPerLaunch];
  long long numel[kMaxTensorsPerLaunch];
};

template <Dtype D>
struct Io;
template <>
struct Io<Dtype::kFloat32> {
  using T = float;
  __device__ static float load(T v) { return v; }
  __device__ static T store(float f) { return f; }
};
template <>
struct Io<Dtype::kFloat16> {
  using T = __half;
  __device__ static float load(T v) { return __half2float(v); }
  __device__ static T store(float f) { return __float2half_rn(f); }
};
template <>
struct Io<Dtype::kBFloat16> {
  using T = __nv_bfloat16;
  __device__ static float load(T v) { return __bfloat162float(v); }
  __device__ static T store(float f) { return __float2bfloat16_rn(f); }
};

// kPack: dst = W(G(src × scale)) with src in G, dst in W; else dst = G(src) with src in W.
template <Dtype G, Dtype W, bool kPack>
__global__ void bucket_kernel(Table table, float scale) {
  const int k = blockIdx.y;
  const long long n = table.numel[k];
  for (long long j = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<long long>(gridDim.x) * blockDim.x) {
    if constexpr (kPack) {
      const float g = Io<G>::load(static_cast<const typename Io<G>::T*>(table.src[k])[j]);
      const float rounded = Io<G>::load(Io<G>::store(__fmul_rn(g, scale)));
      static_cast<typename Io<W>::T*>(table.dst[k])[j] = Io<W>::store(rounded);
    } else {
      const float w = Io<W>::load(static_cast<const typename Io<W>::T*>(table.src[k])[j]);
      static_cast<typename Io<G>::T*>(table.dst[k])[j] = Io<G>::store(w);
    }
  }
}

template <Dtype G, Dtype W, bool kPack>
void launch(const Table& t, int tensors, long long largest, float scale, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const long long blocks = std::min<long long>((largest + kThreads - 1) / kThreads, 1024);
  const dim3 grid(static_cast<unsigned>(std::max<long long>(blocks, 1)),
                  static_cast<unsigned>(tensors));
  bucket_kernel<G, W, kPack><<<grid, kThreads, 0, stream>>>(t, scale);
  DTUNE_CUDA_CHECK(cudaGetLastError());
}

template <bool kPack>
void launch_dtypes(Dtype g, Dtype w, const Table& t, int tensors, long long largest, float scale,
                   cudaStream_t s) {
  constexpr Dtype F = Dtype::kFloat32, H = Dtype::kFloat16, B = Dtype::kBFloat16;
  if (g == F && w == F) return launch<F, F, kPack>(t, tensors, largest, scale, s);
  if (g == F && w == H) return launch<F, H, kPack>(t, tensors, largest, scale, s);
  if (g == F && w == B) return launch<F, B, kPack>(t, tensors, largest, scale, s);
  if (g == H && w == H) return launch<H, H, kPack>(t, tensors, largest, scale, s);
  if (g == H && w == F) return launch<H, F, kPack>(t, tensors, largest, scale, s);
  if (g == B && w == B) return launch<B, B, kPack>(t, tensors, largest, scale, s);
  if (g == B && w == F) return launch<B, F, kPack>(t, tensors, largest, scale, s);
  if (g == H && w == B) return launch<H, B, kPack>(t, tensors, largest, scale, s);
  return launch<B, H, kPack>(t, tensors, largest, scale, s);
}

// Fills the table kMaxTensorsPerLaunch tensors at a time and launches each batch.
template <bool kPack, class Ref, class Ptrs>
void run(const std::vector<Ref>& refs, Dtype g, Dtype w, float scale, cudaStream_t stream,
         Ptrs ptrs) {
  Table t;
  long long offset = 0;
  for (size_t first = 0; first < refs.size(); first += kMaxTensorsPerLaunch) {
    const size_t count = std::min<size_t>(kMaxTensorsPerLaunch, refs.size() - first);
    long long largest = 0;
    for (size_t i = 0; i < count; ++i) {
      const Ref& r = refs[first + i];
      ptrs(t, static_cast<int>(i), r, offset);
      t.numel[i] = r.numel;
      largest = std::max<long long>(largest, r.numel);
      offset += r.numel;
    }
    launch_dtypes<kPack>(g, w, t, static_cast<int>(count), largest, scale, stream);
  }
}

}  // namespace

void pack_bucket_cuda(const std::vector<TensorRef>& srcs, Dtype grad_dtype, void* flat, Dtype wire,
                      float scale, cudaStream_t stream) {
  char* out = static_cast<char*>(flat);
  const size_t wsize = dtype_size(wire);
  run<true>(srcs, grad_dtype, wire, scale, stream,
            [&](Table& t, int i, const TensorRef& r, long long offset) {
              t.src[i] = r.data;
              t.dst[i] = out + offset * static_cast<long long>(wsize);
            });
}

void unpack_bucket_cuda(const void* flat, Dtype wire, const std::vector<MutableTensorRef>& dsts,
                        Dtype grad_dtype, cudaStream_t stream) {
  const char* in = static_cast<const char*>(flat);
  const size_t wsize = dtype_size(wire);
  run<false>(dsts, grad_dtype, wire, 1.0f, stream,
             [&](Table& t, int i, const MutableTensorRef& r, long long offset) {
               t.src[i] = in + offset * static_cast<long long>(wsize);
               t.dst[i] = r.data;
             });
}

bool has_cuda_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

}  // namespace dtune::kernels
