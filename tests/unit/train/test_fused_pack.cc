// The fused gradient-bucket pack (train/fused_pack.h over kernels/bucket_pack.h) against the torch
// calls it replaces in grad_sync, bit for bit: per tensor `flat.copy_(grad.mul(1/world))` and
// `grad.copy_(flat)`, for every gradient and wire dtype and world sizes whose 1/world is exact
// (4) and inexact (3, 7); and it refuses (returns false, touching nothing) what it cannot do.
#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <vector>

#include "train/fused_pack.h"

namespace dtune::train {
namespace {

// Bitwise equality: the same bytes (so -0 differs from +0 and NaN payloads count).
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  const auto as_int = [](const torch::Tensor& t) {
    return t.view(t.element_size() == 4 ? torch::kInt32 : torch::kInt16);
  };
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         torch::equal(as_int(a), as_int(b));
}

std::vector<torch::Tensor> gradients(torch::ScalarType t) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> out;
  // Sizes that put tensor boundaries inside the parallel split (> 256K elements in all).
  for (int64_t n : {5, 300000, 1, 4097, 70000}) out.push_back((torch::randn({n}) * 100).to(t));
  out[1][7] = -0.0;  // a signed zero and values at the edge of fp16's range
  out[1][8] = 65000;
  out[1][9] = 1e-6;
  return out;
}

TEST(FusedPack, BitIdenticalToMulThenCopyPerTensor) {
  for (auto g : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    for (auto w : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
      for (int world : {1, 3, 4, 7}) {
        const double inv = 1.0 / world;
        const auto grads = gradients(g);
        int64_t total = 0;
        for (const auto& t : grads) total += t.numel();
        torch::Tensor want = torch::empty({total}, torch::TensorOptions().dtype(w));
        int64_t at = 0;
        for (const auto& t : grads) {
          want.narrow(0, at, t.numel()).copy_(t.reshape({-1}).mul(inv));
          at += t.numel();
        }
        torch::Tensor got = torch::full({total}, 7, torch::TensorOptions().dtype(w));
        ASSERT_TRUE(fused_pack(grads, got, static_cast<float>(inv)));
        ASSERT_TRUE(same_bits(got, want)) << g << " -> " << w << " world " << world;
        // Back: grad.copy_(flat slice) per tensor.
        std::vector<torch::Tensor> back, back_want;
        at = 0;
        for (const auto& t : grads) {
          back.push_back(torch::full_like(t, 3));
          back_want.push_back(torch::empty_like(t).copy_(want.narrow(0, at, t.numel())));
          at += t.numel();
        }
        ASSERT_TRUE(fused_unpack(got, back));
        for (size_t k = 0; k < back.size(); ++k)
          ASSERT_TRUE(same_bits(back[k], back_want[k])) << g << " <- " << w << " tensor " << k;
      }
    }
  }
}

TEST(FusedPack, RefusesWhatItCannotDoAndTouchesNothing) {
  torch::Tensor flat = torch::zeros({12});
  const torch::Tensor strided = torch::ones({4, 3}).t();  // non-contiguous
  EXPECT_FALSE(fused_pack({strided}, flat, 0.5f));
  EXPECT_FALSE(fused_pack({torch::ones({12}, torch::kDouble)}, flat, 0.5f));  // float64
  EXPECT_FALSE(fused_pack({torch::ones({11})}, flat, 0.5f));                  // sizes disagree
  EXPECT_FALSE(fused_pack({torch::ones({6}), torch::ones({6}, torch::kHalf)}, flat, 0.5f));
  EXPECT_TRUE(torch::equal(flat, torch::zeros({12})));
  std::vector<torch::Tensor> dst = {strided.clone()};  // keeps the transposed strides
  EXPECT_FALSE(fused_unpack(flat, dst));
}

}  // namespace
}  // namespace dtune::train
