// The fused bucket pack and unpack on the host (see bucket_pack.h). The loops are templated on
// the dtypes so that the fp32 -> fp32 case compiles to a vectorised multiply-and-store.
#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include "core/float16.h"
#include "kernels/bucket_pack.h"

namespace dtune::kernels {

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat16:
      return "float16";
    case Dtype::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

size_t dtype_size(Dtype d) { return d == Dtype::kFloat32 ? 4 : 2; }

namespace {

struct F32 {
  using T = float;
  static float load(T v) { return v; }
  static T store(float f) { return f; }
};
struct F16 {
  using T = uint16_t;
  static float load(T v) { return half_to_float(v); }
  static T store(float f) { return float_to_half(f); }
};
struct BF16 {
  using T = uint16_t;
  static float load(T v) { return bfloat16_to_float(v); }
  static T store(float f) { return float_to_bfloat16(f); }
};

// The value one element takes: float product, rounded to the gradient dtype (mul's output), then
// converted to the wire dtype (copy_'s cast: every conversion goes through float).
template <class G, class W>
inline typename W::T pack_one(typename G::T g, float scale) {
  return W::store(G::load(G::store(G::load(g) * scale)));
}

constexpr int64_t kParallelElements = 256 * 1024;

// Runs body(tensor k, first element, last element, flat offset of the first) over [0, total),
// split into one contiguous range per OpenMP thread when the bucket is large.
template <class Body>
void for_ranges(const std::vector<int64_t>& offsets, Body body) {
  const int64_t total = offsets.back();
  const int nt = total >= kParallelElements ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t lo = total * t / n, hi = total * (t + 1) / n;
    // The tensor holding element lo: the last offset <= lo.
    size_t k = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), lo) -
                                   offsets.begin()) -
               1;
    for (int64_t at = lo; at < hi && k + 1 < offsets.size(); ++k) {
      const int64_t end = std::min(hi, offsets[k + 1]);
      if (end > at) body(k, at - offsets[k], end - offsets[k], at);
      at = std::max(at, end);
    }
  }
}

template <class TRef>
std::vector<int64_t> offsets_of(const std::vector<TRef>& refs) {
  std::vector<int64_t> off(refs.size() + 1, 0);
  for (size_t k = 0; k < refs.size(); ++k) off[k + 1] = off[k] + refs[k].numel;
  return off;
}

template <class G, class W>
void pack_typed(const std::vector<TensorRef>& srcs, void* flat, float scale) {
  auto* out = static_cast<typename W::T*>(flat);
  for_ranges(offsets_of(srcs), [&](size_t k, int64_t lo, int64_t hi, int64_t at) {
    const auto* __restrict in = static_cast<const typename G::T*>(srcs[k].data);
    typename W::T* __restrict o = out + at - lo;
    for (int64_t j = lo; j < hi; ++j) o[j] = pack_one<G, W>(in[j], scale);
  });
}

template <class G, class W>
void unpack_typed(const void* flat, const std::vector<MutableTensorRef>& dsts) {
  const auto* in = static_cast<const typename W::T*>(flat);
  for_ranges(offsets_of(dsts), [&](size_t k, int64_t lo, int64_t hi, int64_t at) {
    auto* __restrict o = static_cast<typename G::T*>(dsts[k].data);
    const typename W::T* __restrict i = in + at - lo;
    for (int64_t j = lo; j < hi; ++j) o[j] = G::store(W::load(i[j]));
  });
}

// Calls f.template operator()<G, W>() for the runtime dtypes.
template <class F>
void dispatch(Dtype grad, Dtype wire, F&& f) {
  auto with_wire = [&]<class G>() {
    switch (wire) {
      case Dtype::kFloat32:
        return f.template operator()<G, F32>();
      case Dtype::kFloat16:
        return f.template operator()<G, F16>();
      case Dtype::kBFloat16:
        return f.template operator()<G, BF16>();
    }
    throw std::invalid_argument("bucket pack: unknown wire dtype");
  };
  switch (grad) {
    case Dtype::kFloat32:
      return with_wire.template operator()<F32>();
    case Dtype::kFloat16:
      return with_wire.template operator()<F16>();
    case Dtype::kBFloat16:
      return with_wire.template operator()<BF16>();
  }
  throw std::invalid_argument("bucket pack: unknown gradient dtype");
}

}  // namespace

void pack_bucket(const std::vector<TensorRef>& srcs, Dtype grad_dtype, void* flat, Dtype wire,
                 float scale) {
  if (srcs.empty()) return;
  dispatch(grad_dtype, wire, [&]<class G, class W>() { pack_typed<G, W>(srcs, flat, scale); });
}

void unpack_bucket(const void* flat, Dtype wire, const std::vector<MutableTensorRef>& dsts,
                   Dtype grad_dtype) {
  if (dsts.empty()) return;
  dispatch(grad_dtype, wire, [&]<class G, class W>() { unpack_typed<G, W>(flat, dsts); });
}

void pack_bucket_reference(const std::vector<TensorRef>& srcs, Dtype grad_dtype, void* flat,
                           Dtype wire, float scale) {
  dispatch(grad_dtype, wire, [&]<class G, class W>() {
    auto* out = static_cast<typename W::T*>(flat);
    for (const auto& s : srcs)
      for (int64_t j = 0; j < s.numel; ++j)
        *out++ = pack_one<G, W>(static_cast<const typename G::T*>(s.data)[j], scale);
  });
}

void unpack_bucket_reference(const void* flat, Dtype wire,
                             const std::vector<MutableTensorRef>& dsts, Dtype grad_dtype) {
  dispatch(grad_dtype, wire, [&]<class G, class W>() {
    const auto* in = static_cast<const typename W::T*>(flat);
    for (const auto& d : dsts)
      for (int64_t j = 0; j < d.numel; ++j)
        static_cast<typename G::T*>(d.data)[j] = G::store(W::load(*in++));
  });
}

}  // namespace dtune::kernels
