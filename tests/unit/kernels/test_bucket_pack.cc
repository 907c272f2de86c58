// The fused bucket pack and unpack on the host: equal to the element-by-element reference for
// every gradient/wire dtype pair, on bucket sizes that take the parallel path with tensor
// boundaries inside a thread's range; the layout is the concatenation; and known values come out
// as rounding to nearest even says.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/float16.h"
#include "kernels/bucket_pack.h"

namespace dtune::kernels {
namespace {

constexpr Dtype kDtypes[] = {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16};

// Gradients of mixed sizes (some empty, one large enough for the parallel path), filled with
// random normal values in their dtype.
struct Grads {
  std::vector<std::vector<char>> storage;
  std::vector<TensorRef> refs;
  int64_t total = 0;
};

Grads make_grads(Dtype d, const std::vector<int64_t>& sizes, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  Grads g;
  for (int64_t n : sizes) {
    std::vector<char> bytes(static_cast<size_t>(n) * dtype_size(d));
    for (int64_t j = 0; j < n; ++j) {
      const float v = normal(rng);
      if (d == Dtype::kFloat32) {
        std::memcpy(bytes.data() + 4 * j, &v, 4);
      } else {
        const uint16_t h = d == Dtype::kFloat16 ? float_to_half(v) : float_to_bfloat16(v);
        std::memcpy(bytes.data() + 2 * j, &h, 2);
      }
    }
    g.storage.push_back(std::move(bytes));
    g.total += n;
  }
  for (size_t k = 0; k < sizes.size(); ++k) g.refs.push_back({g.storage[k].data(), sizes[k]});
  return g;
}

const std::vector<int64_t> kSizes = {3, 0, 1000, 300001, 7, 64, 0, 65537, 1};

TEST(BucketPack, EqualsTheReferenceForEveryDtypePair) {
  for (Dtype grad : kDtypes) {
    for (Dtype wire : kDtypes) {
      for (float scale : {1.0f, 0.25f, static_cast<float>(1.0 / 3.0)}) {
        const Grads g = make_grads(grad, kSizes, 7);
        const size_t wbytes = static_cast<size_t>(g.total) * dtype_size(wire);
        std::vector<char> fast(wbytes, 1), ref(wbytes, 2);
        pack_bucket(g.refs, grad, fast.data(), wire, scale);
        pack_bucket_reference(g.refs, grad, ref.data(), wire, scale);
        ASSERT_EQ(0, std::memcmp(fast.data(), ref.data(), wbytes))
            << to_string(grad) << " -> " << to_string(wire) << " scale " << scale;
        // Unpack into fresh gradients: the same bits as the reference's unpack.
        Grads out_fast = make_grads(grad, kSizes, 99), out_ref = make_grads(grad, kSizes, 98);
        std::vector<MutableTensorRef> df, dr;
        for (size_t k = 0; k < kSizes.size(); ++k) {
          df.push_back({out_fast.storage[k].data(), kSizes[k]});
          dr.push_back({out_ref.storage[k].data(), kSizes[k]});
        }
        unpack_bucket(fast.data(), wire, df, grad);
        unpack_bucket_reference(ref.data(), wire, dr, grad);
        for (size_t k = 0; k < kSizes.size(); ++k)
          ASSERT_EQ(out_fast.storage[k], out_ref.storage[k])
              << "unpack " << to_string(grad) << " <- " << to_string(wire) << " tensor " << k;
      }
    }
  }
}

TEST(BucketPack, LayoutIsTheConcatenationScaled) {
  // fp32 -> fp32 with scale 1/2: exact, so flat[offset_k + j] = src_k[j] / 2 for every element.
  std::vector<float> a = {1, -2, 3}, b = {}, c = {8, 16};
  std::vector<float> flat(5, -1);
  pack_bucket({{a.data(), 3}, {b.data(), 0}, {c.data(), 2}}, Dtype::kFloat32, flat.data(),
              Dtype::kFloat32, 0.5f);
  EXPECT_EQ(flat, (std::vector<float>{0.5f, -1, 1.5f, 4, 8}));
  std::vector<float> a2(3), c2(2);
  unpack_bucket(flat.data(), Dtype::kFloat32, {{a2.data(), 3}, {nullptr, 0}, {c2.data(), 2}},
                Dtype::kFloat32);
  EXPECT_EQ(a2, (std::vector<float>{0.5f, -1, 1.5f}));
  EXPECT_EQ(c2, (std::vector<float>{4, 8}));
}

TEST(BucketPack, CastRoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between fp16's 1 and 1 + 2^-10: ties go to the even mantissa (1).
  // 1 + 3·2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: it goes to 1 + 2^-9.
  std::vector<float> g = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 70000.0f};
  std::vector<uint16_t> flat(3);
  pack_bucket({{g.data(), 3}}, Dtype::kFloat32, flat.data(), Dtype::kFloat16, 1.0f);
  EXPECT_EQ(half_to_float(flat[0]), 1.0f);
  EXPECT_EQ(half_to_float(flat[1]), 1.0f + 0x1p-9f);
  EXPECT_EQ(flat[2], 0x7c00);  // above fp16's largest finite value: +inf
  // bf16 gradients scaled by 1/3: the product is rounded to bf16 first (mul's output dtype).
  const uint16_t x = float_to_bfloat16(1.0f);
  uint16_t out = 0;
  const float third = static_cast<float>(1.0 / 3.0);
  pack_bucket({{&x, 1}}, Dtype::kBFloat16, &out, Dtype::kBFloat16, third);
  EXPECT_EQ(out, float_to_bfloat16(third));
  float wide = 0;
  pack_bucket({{&x, 1}}, Dtype::kBFloat16, &wide, Dtype::kFloat32, third);
  EXPECT_EQ(wide, bfloat16_to_float(float_to_bfloat16(third)));
}

}  // namespace
}  // namespace dtune::kernels
