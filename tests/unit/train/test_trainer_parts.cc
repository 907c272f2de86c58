// The trainer's small parts that need no MPI: local SGD's schedule (which steps average, after
// which the ranks may be compared) and its averaging of strided (channels-last) parameters through
// a reducer that, as NCCL's, takes contiguous buffers only; and the fault injector (each hook acts
// at its step and rank only, and does nothing without its flag).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <deque>

#include "core/error.h"
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

// Two ranks, this one and a peer whose parameters are `peer` (in the same order, logical layout).
// As NcclReducer, it refuses a buffer that is not contiguous; it checks that each buffer it sums
// has the peer's shape, then adds the peer's values in memory order, as a real reduction does.
class ContiguousOnlyReducer final : public Reducer {
 public:
  explicit ContiguousOnlyReducer(std::vector<torch::Tensor> peer)
      : peer_(peer.begin(), peer.end()) {}
  std::string name() const override { return "contiguous-only"; }
  void start(torch::Tensor) override {}
  void start_reduce_scatter(torch::Tensor, torch::Tensor) override {}
  void wait_all(const Deadline&) override {}
  void broadcast(torch::Tensor, int) override {}
  void allreduce_max(torch::Tensor) override {}
  void allgather_in_place(torch::Tensor) override {}
  int64_t start_allgather(torch::Tensor) override { return 0; }
  void wait_gathered(int64_t, const Deadline&) override {}
  void allreduce_sum(torch::Tensor t) override {
    DTUNE_CHECK(t.is_contiguous(), "the reducer was handed a strided buffer");
    ASSERT_FALSE(peer_.empty());
    const torch::Tensor other = peer_.front().contiguous();
    peer_.pop_front();
    ASSERT_EQ(t.sizes(), other.sizes());
    // Memory order of both: flat views of contiguous buffers.
    t.view({-1}).add_(other.view({-1}));
  }

 private:
  std::deque<torch::Tensor> peer_;
};

TEST(LocalSgd, AveragesChannelsLastWeightsThroughContiguousBuffers) {
  torch::manual_seed(3);
  // A convolution's weight in channels-last (strided) beside a bias and a linear weight.
  std::vector<torch::Tensor> params = {
      torch::randn({8, 3, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast), torch::randn({8}),
      torch::randn({4, 8})};
  ASSERT_FALSE(params[0].is_contiguous());
  std::vector<torch::Tensor> before, peer, expected;
  for (const auto& p : params) {
    before.push_back(p.clone(at::MemoryFormat::Preserve));
    peer.push_back(p * 2 + 1);
    expected.push_back((p + (p * 2 + 1)) / 2);  // the same operations, element by element
  }
  ContiguousOnlyReducer reducer(peer);
  std::vector<torch::Tensor> no_master;
  ASSERT_NO_THROW(average_parameters(reducer, 2, params, no_master));
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], expected[i])) << "parameter " << i;
    EXPECT_EQ(params[i].strides(), before[i].strides()) << "parameter " << i << " changed layout";
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
