// The trainer's small parts that need no MPI: local SGD's schedule (which steps average, after
// which the ranks may be compared) and the fault injector (each hook acts at its step and rank
// only, and does nothing without its flag).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "train/fault_injector.h"
#include "train/local_sgd.h"

namespace dtune::train {
namespace {

TEST(LocalSgdSchedule, AveragesAfterEveryHthStep) {
  const LocalSgdSchedule h4(4, 2);
  ASSERT_TRUE(h4.on());
  for (int step = 0; step < 12; ++step) {
    const bool h = step == 3 || step == 7 || step == 11;
    EXPECT_EQ(h4.averages_after(step), h) << step;
    EXPECT_EQ(h4.equal_after(step), h) << step;
  }
}

TEST(LocalSgdSchedule, OffWithOneRankOrZero) {
  for (const LocalSgdSchedule s : {LocalSgdSchedule(0, 4), LocalSgdSchedule(2, 1)}) {
    EXPECT_FALSE(s.on());
    for (int step = 0; step < 5; ++step) {
      EXPECT_FALSE(s.averages_after(step));
      EXPECT_TRUE(s.equal_after(step));  // every step leaves the ranks equal
    }
  }
}

std::vector<torch::Tensor> ones() { return {torch::ones({3}), torch::ones({2, 2})}; }

bool all_finite(const std::vector<torch::Tensor>& ts) {
  for (const auto& t : ts)
    if (!torch::isfinite(t).all().item<bool>()) return false;
  return true;
}

TEST(FaultInjector, PlantsInfOnlyAtItsStepAndRank) {
  Options o;
  o.plant_inf_step = 2;
  o.plant_inf_rank = 1;
  const FaultInjector rank1(o, 1), rank0(o, 0);
  auto g = ones();
  rank1.after_reduction(1, g);
  rank0.after_reduction(2, g);
  EXPECT_TRUE(all_finite(g));
  rank1.after_reduction(2, g);
  for (const auto& t : g) EXPECT_TRUE(torch::isinf(t).all().item<bool>());
}

TEST(FaultInjector, PerturbsOnlyAfterTheFirstStepOfItsRank) {
  Options o;
  o.perturb_rank = 1;
  const FaultInjector rank1(o, 1), rank0(o, 0);
  auto p = ones();
  rank0.after_step(0, p);
  rank1.after_step(1, p);
  EXPECT_TRUE(torch::equal(p[0], torch::ones({3})));
  rank1.after_step(0, p);
  EXPECT_FLOAT_EQ(p[0][0].item<float>(), 1.001f);
  EXPECT_TRUE(torch::equal(p[1], torch::ones({2, 2})));  // the first parameter only
}

TEST(FaultInjector, DoesNothingWithoutFlags) {
  const FaultInjector off(Options{}, 0);
  auto p = ones();
  for (int step = 0; step < 3; ++step) {
    off.after_reduction(step, p);
    off.after_step(step, p);
  }
  EXPECT_TRUE(torch::equal(p[0], torch::ones({3})));
  EXPECT_TRUE(all_finite(p));
}

}  // namespace
}  // namespace dtune::train
