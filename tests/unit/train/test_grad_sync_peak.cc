// The gradient peak (grad_bytes_peak) counts a reduce-scatter's flat for as long as the reducer
// holds it, and not after (issue 59, item 2). GradSync lets go of each bucket's flat when it
// starts the bucket's reduce-scatter; the reducer keeps it until the collective is done (the MPI
// reducer in its queue, the NCCL reducer until the event after the collective, at the latest at
// wait_all). Before the fix the NCCL reducer dropped its reference at once, so the peak counted
// every running reduce-scatter's flat as freed while the caching allocator still held it. Here,
// on one rank of the CPU: a reducer that holds every flat until wait_all (as the NCCL reducer now
// does) against one that drops it at once (as it did).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/deadline.h"
#include "models/model.h"
#include "models/registry.h"
#include "train/config.h"
#include "train/grad_sync.h"
#include "train/reducer.h"

namespace dtune::train {
namespace {

// One rank: a reduce-scatter's part is the whole flat. `hold`: the flats are kept until wait_all.
class OneRankReducer final : public Reducer {
 public:
  explicit OneRankReducer(bool hold) : hold_(hold) {}
  std::string name() const override { return hold_ ? "holding" : "dropping"; }
  void start(torch::Tensor) override {}
  void start_reduce_scatter(torch::Tensor flat, torch::Tensor shard) override {
    shard.copy_(flat.narrow(0, 0, shard.numel()));
    if (hold_) held_.push_back(std::move(flat));
  }
  void wait_all(const Deadline&) override { held_.clear(); }
  void broadcast(torch::Tensor, int) override {}
  void allreduce_sum(torch::Tensor) override {}
  void allreduce_max(torch::Tensor) override {}
  void allgather_in_place(torch::Tensor) override {}
  int64_t start_allgather(torch::Tensor) override { return 0; }
  void wait_gathered(int64_t, const Deadline&) override {}

 private:
  bool hold_;
  std::vector<torch::Tensor> held_;
};

struct Peaks {
  int64_t step = 0;   // take_peak_bytes() over the step
  int64_t after = 0;  // take_peak_bytes() right after it: what is held between steps
  int64_t shards = 0;
  size_t buckets = 0;
};

Peaks one_step(bool hold) {
  models::ModelOptions mo;
  mo.layers = 2;
  mo.context = 8;
  mo.vocab = 64;
  auto model = models::make_model("gpt2-tiny", mo);
  OneRankReducer reducer(hold);
  Options o;
  o.bucket_mb = 0.01;  // several buckets
  o.first_bucket_mb = 0.01;
  GradSync sync(model->parameters(), reducer, 1, o, /*reduce_scatter=*/true);
  const auto [tokens, targets] = model->synthetic_batch(2, torch::kCPU, 7);
  sync.prepare(true);
  model->loss(model->forward(tokens), targets).backward();
  sync.finish(Deadline::after_s(60));
  Peaks p;
  p.step = sync.take_peak_bytes();
  p.after = sync.take_peak_bytes();
  p.shards = sync.shard_bytes();
  p.buckets = sync.buckets();
  return p;
}

TEST(GradSyncPeak, CountsAReduceScattersFlatWhileTheReducerHoldsItAndNotAfter) {
  const Peaks held = one_step(true), dropped = one_step(false);
  ASSERT_GT(held.buckets, 2u);
  ASSERT_EQ(held.shards, dropped.shards);
  // On one rank a flat is its shard's size: when the last bucket is launched every flat is held
  // beside every shard.
  EXPECT_GE(held.step, 2 * held.shards);
  EXPECT_LT(dropped.step, held.step);
  // Between steps only the shards: the flats the reducer let go of at wait_all are not counted.
  EXPECT_EQ(held.after, held.shards);
  EXPECT_EQ(dropped.after, dropped.shards);
}

}  // namespace
}  // namespace dtune::train
