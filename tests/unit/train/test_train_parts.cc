// dtune-train's parts that need no MPI: the bucket plan (reverse order, first-bucket cap, oversized
// parameters alone) and the fused optimizers against LibTorch's reference torch::optim.
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "train/grad_sync.h"
#include "train/optimizer.h"

namespace dtune::train {
namespace {

TEST(Buckets, ReverseOrderWithFirstBucketCap) {
  // Parameters 0..5 of 4, 4, 8, 2, 2, 10 bytes; first cap 4, then 10.
  const BucketLayout l = plan_buckets({4, 4, 8, 2, 2, 10}, 4, 10);
  ASSERT_EQ(l.params.size(), 4u);
  EXPECT_EQ(l.params[0], (std::vector<size_t>{5}));     // 10 B alone: larger than the first cap
  EXPECT_EQ(l.params[1], (std::vector<size_t>{4, 3}));  // 2 + 2, then 8 would exceed 10
  EXPECT_EQ(l.params[2], (std::vector<size_t>{2}));     // 8, then 4 would exceed 10
  EXPECT_EQ(l.params[3], (std::vector<size_t>{1, 0}));
  EXPECT_EQ(l.bytes, (std::vector<int64_t>{10, 4, 8, 8}));
}

TEST(Buckets, OneBucketAndOnePerParameter) {
  EXPECT_EQ(plan_buckets({4, 4, 4}, 1000, 1000).params.size(), 1u);
  EXPECT_EQ(plan_buckets({4, 4, 4}, 1, 1).params.size(), 3u);
  EXPECT_TRUE(plan_buckets({}, 1, 1).params.empty());
}

// Runs three steps of `fused` and `reference` on identical parameters and gradients.
template <typename Reference>
void compare(OptimizerKind kind, Reference make_reference) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> a = {torch::randn({7, 5}), torch::randn({13})};
  std::vector<torch::Tensor> b;
  for (auto& t : a) {
    t.requires_grad_(true);
    b.push_back(t.detach().clone().requires_grad_(true));
  }
  auto fused = make_fused_optimizer(kind, a, 0.01);
  auto reference = make_reference(b);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      torch::Tensor g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    fused->step();
    reference.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << (a[i] - b[i]).abs().max().item<float>();
}

TEST(FusedOptimizers, SgdMatchesTorchOptim) {
  compare(OptimizerKind::kSgd, [](std::vector<torch::Tensor> p) {
    return torch::optim::SGD(p, torch::optim::SGDOptions(0.01).momentum(0.9));
  });
}

TEST(FusedOptimizers, AdamwMatchesTorchOptim) {
  compare(OptimizerKind::kAdamw, [](std::vector<torch::Tensor> p) {
    return torch::optim::AdamW(p, torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  });
}

}  // namespace
}  // namespace dtune::train
