// ZeRO-3's unit gathers, issued and waited for in the order train/zero3.h promises, forward and
// backward apart: a recording reducer (one rank; the gathers are no-ops there) logs every gather as
// it is issued and every wait before a piece uses its unit, named by the unit whose parameters are
// views of the gathered buffer. The expected logs are written out by hand from the rule in
// zero3.h (prefetch N: the next N units in forward, the previous N in backward; reshard on: every
// unit gathered again before its backward; the tied embedding gathered until the head used it),
// for a 3-block GPT. A prefetch window one unit off in either direction, or a gather issued at
// its use instead of ahead, gives another log (scripts/cpp-plants.sh plants both). The bytes
// counted as gathered need two ranks: tests/mpi/test_shard_mpi.py.
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
#include "train/zero.h"
#include "train/zero3.h"

namespace dtune::train {
namespace {

// One rank: a reduce-scatter keeps the whole flat (its own part), a gather has nothing to fetch.
// Logs "g <unit>" per gather issued and "w <unit>" per wait, the unit named by the parameter
// whose storage the gathered buffer is ("h.1", "embed": wte, "head": ln_f).
class RecordingReducer final : public Reducer {
 public:
  explicit RecordingReducer(torch::nn::Module& model) : model_(model) {}
  std::string name() const override { return "recording"; }
  void start(torch::Tensor) override {}
  void start_reduce_scatter(torch::Tensor flat, torch::Tensor shard) override {
    shard.copy_(flat.narrow(0, 0, shard.numel()));
  }
  void wait_all(const Deadline&) override {}
  void broadcast(torch::Tensor, int) override {}
  void allreduce_sum(torch::Tensor) override {}
  void allreduce_max(torch::Tensor) override {}
  void allgather_in_place(torch::Tensor) override {}
  int64_t start_allgather(torch::Tensor full) override {
    units_.push_back(unit_of(full));
    log.push_back("g " + units_.back());
    return static_cast<int64_t>(units_.size());
  }
  void wait_gathered(int64_t ticket, const Deadline&) override {
    log.push_back("w " + units_.at(static_cast<size_t>(ticket - 1)));
  }
  std::vector<std::string> log;

 private:
  std::string unit_of(const torch::Tensor& full) const {
    const auto* lo = static_cast<const char*>(full.data_ptr());
    const auto* hi = lo + full.nbytes();
    for (const auto& p : model_.named_parameters()) {
      const auto* at = static_cast<const char*>(p.value().data_ptr());
      if (at < lo || at >= hi) continue;
      std::string k = p.key();  // "transformer.h.1.ln_1.weight", "transformer.wte.weight"
      if (k.rfind("transformer.", 0) == 0) k = k.substr(12);
      if (k.rfind("h.", 0) == 0) return k.substr(0, k.find('.', 2));
      return k.rfind("wte", 0) == 0 || k.rfind("wpe", 0) == 0 ? "embed" : "head";
    }
    return "?";
  }
  torch::nn::Module& model_;
  std::vector<std::string> units_;
};

struct Step {
  std::vector<std::string> forward, backward;
};

Step one_step(int prefetch, bool reshard) {
  models::ModelOptions mo;
  mo.layers = 3;
  mo.context = 8;
  mo.vocab = 64;
  auto model = models::make_model("gpt2-tiny", mo);
  std::vector<torch::Tensor> params = model->parameters();
  RecordingReducer reducer(*model);
  Options o;
  o.shard = ShardMode::kZero3;
  Zero3Units units(*model, params, 1, 0, reducer, Zero3Units::Options{reshard, 0, prefetch, 60});
  GradSync sync(params, reducer, 1, o, /*reduce_scatter=*/true, &units.layout());
  ZeroOptimizer zero(params, bucket_shards(sync, sync.buckets(), params, 1), false, reducer, 0,
                     OptimizerKind::kSgd, 0.1, /*keep_master=*/true);
  units.shard(sync, zero);
  const auto [tokens, targets] = model->synthetic_batch(2, torch::kCPU, 7);
  Step s;
  reducer.log.clear();
  sync.prepare(true);
  const torch::Tensor loss = model->loss(units.forward(tokens), targets);
  s.forward = reducer.log;
  reducer.log.clear();
  loss.backward();
  sync.finish(Deadline::after_s(60));
  units.release_all();
  s.backward = reducer.log;
  return s;
}

using Log = std::vector<std::string>;

TEST(Zero3Order, PrefetchOneGathersTheNextUnitInForwardAndThePreviousInBackward) {
  const Step s = one_step(1, true);
  // Forward: each piece's own unit, then the next one issued before the wait for its own.
  EXPECT_EQ(s.forward, (Log{"g embed", "g h.0", "w embed", "g h.1", "w h.0", "g h.2", "w h.1",
                            "g head", "w h.2", "w head"}));
  // Backward: the head's piece uses the head and the tied embedding (lowest unit 0: nothing
  // before it); each block then its own unit (gathered again: reshard on) and the one before.
  EXPECT_EQ(s.backward, (Log{"g embed", "g head", "w embed", "w head", "g h.2", "g h.1", "w h.2",
                             "g h.0", "w h.1", "w h.0"}));
}

TEST(Zero3Order, PrefetchZeroGathersEachUnitAtItsUse) {
  const Step s = one_step(0, true);
  EXPECT_EQ(s.forward, (Log{"g embed", "w embed", "g h.0", "w h.0", "g h.1", "w h.1", "g h.2",
                            "w h.2", "g head", "w head"}));
  EXPECT_EQ(s.backward, (Log{"g embed", "g head", "w embed", "w head", "g h.2", "w h.2", "g h.1",
                             "w h.1", "g h.0", "w h.0"}));
}

TEST(Zero3Order, PrefetchTwoGathersTwoAheadAndReshardOffGathersOncePerStep) {
  const Step s = one_step(2, false);
  EXPECT_EQ(s.forward, (Log{"g embed", "g h.0", "g h.1", "w embed", "g h.2", "w h.0", "g head",
                            "w h.1", "w h.2", "w head"}));
  EXPECT_TRUE(s.backward.empty()) << s.backward.size();  // kept from forward into backward
}

}  // namespace
}  // namespace dtune::train
