// The pipeline's pure parts: the partition is contiguous, keeps the embedding with the first stage
// and the head with the last, and minimises the costliest chunk (checked against every possible
// cut); every schedule runs without deadlock, each stage does every forward and backward once,
// 1F1B holds at most P - stage micro-batches where GPipe holds M, and the simulated bubble with
// equal stage times is exactly the theory's (P-1)/(M+P-1), and (P-1)/(VM+P-1) interleaved.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "train/mesh.h"
#include "train/pipeline/partition.h"
#include "train/pipeline/schedule.h"

namespace dtune::train {
namespace {

using models::PieceKind;

std::vector<PieceCost> gpt_like(const std::vector<double>& blocks, double embed, double head) {
  std::vector<PieceCost> out{{PieceKind::kFirst, embed}};
  for (double b : blocks) out.push_back({PieceKind::kBlock, b});
  out.push_back({PieceKind::kLast, head});
  return out;
}

// The largest chunk cost of a cut (starts of each chunk, as partition_pieces returns).
double worst(const std::vector<PieceCost>& p, const std::vector<size_t>& starts) {
  double most = 0;
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : p.size();
    double c = 0;
    for (size_t i = starts[k]; i < end; ++i) c += p[i].cost;
    most = std::max(most, c);
  }
  return most;
}

// Every cut into `chunks` non-empty runs whose later chunks start at pieces first..last, by brute
// force: the best worst chunk. Ends joined to their blocks (gpt_like): 2..size - 2; ends apart:
// 1..size - 1.
double best_by_enumeration(const std::vector<PieceCost>& p, int chunks, size_t first, size_t last) {
  double best = 1e300;
  std::vector<size_t> starts{0};
  std::function<void(size_t)> rec = [&](size_t next) {
    if (static_cast<int>(starts.size()) == chunks) {
      best = std::min(best, worst(p, starts));
      return;
    }
    for (size_t i = next; i <= last; ++i) {
      starts.push_back(i);
      rec(i + 1);
      starts.pop_back();
    }
  };
  rec(first);
  return best;
}

TEST(PipelinePartition, EndsStayWithTheirStagesAndTheCutIsOptimal) {
  const std::vector<std::vector<double>> cases = {
      {1, 1, 1, 1}, {5, 1, 1, 1, 1, 5}, {3, 7, 2, 9, 4, 4, 1}, {1, 2, 3, 4, 5, 6, 7, 8}};
  for (const auto& blocks : cases)
    for (int K = 1; K <= static_cast<int>(blocks.size()); ++K) {
      const auto p = gpt_like(blocks, 0.5, 2.5);
      const auto starts = partition_pieces(p, K);
      ASSERT_EQ(starts.size(), static_cast<size_t>(K));
      EXPECT_EQ(starts[0], 0u);
      for (size_t k = 1; k < starts.size(); ++k) {
        EXPECT_GT(starts[k], starts[k - 1]);  // no empty chunk
        EXPECT_GE(starts[k], 2u);             // the embedding stays with the first block
        EXPECT_LE(starts[k], p.size() - 2);   // the head stays with the last block
      }
      EXPECT_DOUBLE_EQ(worst(p, starts), best_by_enumeration(p, K, 2, p.size() - 2));
    }
}

// With the ends apart, the cut may also fall after the embedding and before the head: every cut
// of the N pieces into K non-empty runs is a candidate, and the optimum over them is found. A head
// as costly as three blocks goes alone, which the joined ends could not do.
TEST(PipelinePartition, EndsApartMayStandAloneAndTheCutIsOptimal) {
  for (const auto& blocks : std::vector<std::vector<double>>{{1, 1}, {1, 1, 1}, {3, 7, 2, 9}})
    for (int K = 1; K <= static_cast<int>(blocks.size()) + 2; ++K) {
      const auto p = gpt_like(blocks, 0.5, 3);
      const auto starts = partition_pieces(p, K, /*ends_apart=*/true);
      ASSERT_EQ(starts.size(), static_cast<size_t>(K));
      for (size_t k = 1; k < starts.size(); ++k) EXPECT_GT(starts[k], starts[k - 1]);
      EXPECT_DOUBLE_EQ(worst(p, starts), best_by_enumeration(p, K, 1, p.size() - 1));
    }
  // embed 0.5 | three blocks of 1 | head 3: two stages cut before the head.
  EXPECT_EQ(partition_pieces(gpt_like({1, 1, 1}, 0.5, 3), 2, true), (std::vector<size_t>{0, 4}));
  EXPECT_EQ(partition_pieces(gpt_like({1, 1, 1}, 0.5, 3), 2, false), (std::vector<size_t>{0, 3}));
}

TEST(PipelinePartition, MoreChunksThanBlocksIsAUsageError) {
  EXPECT_THROW(partition_pieces(gpt_like({1, 1}, 0, 0), 3), UsageError);
  EXPECT_NO_THROW(partition_pieces(gpt_like({1, 1}, 0, 0), 4, true));
  EXPECT_THROW(partition_pieces(gpt_like({1, 1}, 0, 0), 5, true), UsageError);
}

TEST(PipelinePartition, DescribesTheCuts) {
  std::vector<models::Piece> pieces;
  for (const char* n : {"embed", "h.0", "h.1", "head"}) {
    models::Piece piece;
    piece.name = n;
    pieces.push_back(piece);
  }
  EXPECT_EQ(describe_cuts(pieces, {0, 2}), "embed,h.0 | h.1,head");
}

constexpr Schedule kSchedules[] = {Schedule::kGpipe, Schedule::k1f1b, Schedule::kInterleaved,
                                   Schedule::kZbH1, Schedule::kZbV};

TEST(PipelineSchedule, EveryStageRunsEachActionOnceWithoutDeadlock) {
  for (Schedule s : kSchedules)
    for (int P : {2, 3, 4})
      for (int M : {P, 2 * P, 3 * P})
        for (int V : s == Schedule::kInterleaved ? std::vector<int>{2, 3} : std::vector<int>{1}) {
          // A zero-bubble schedule splits each backward into B and W; zb-v runs two chunks.
          const bool zb = s == Schedule::kZbH1 || s == Schedule::kZbV;
          const size_t passes = zb ? 3 : 2;
          const int chunks = chunks_per_stage(s, V);
          for (int st = 0; st < P; ++st) {
            std::set<std::tuple<int, int, int>> seen;
            for (const Action& a : stage_actions(s, P, M, V, st))
              EXPECT_TRUE(seen.insert({static_cast<int>(a.kind), a.micro, a.chunk}).second);
            EXPECT_EQ(seen.size(), passes * M * chunks);
          }
          EXPECT_FALSE(simulate_pipeline(s, P, M, V, 1.0, 2.0).deadlock)
              << to_string(s) << " P=" << P << " M=" << M << " V=" << V;
        }
}

// The NCCL stage channel (train/pipeline/nccl_p2p.cc) keeps each way between two stages as one
// ordered link per kind (activations, gradients), where NCCL matches the i-th send with the i-th
// receive: every schedule must send each link's tensors in the order its receiver asks for them,
// as the runner does (a forward of virtual stage v receives v - 1's activation and sends its own to
// v + 1; a backward receives v + 1's gradient and sends its own to v - 1).
TEST(PipelineSchedule, EachLinkIsReceivedInTheOrderItIsSent) {
  using Transfer = std::pair<int, int>;  // (edge's lower virtual stage, micro-batch)
  for (Schedule s : kSchedules)
    for (int P : {2, 3, 4})
      for (int M : {P, 2 * P, 3 * P})
        for (int V : s == Schedule::kInterleaved ? std::vector<int>{2, 3} : std::vector<int>{1}) {
          const int K = P * chunks_per_stage(s, V);
          // [kind][from][to]: what `from` sends, in its order; what `to` receives, in its order.
          std::map<std::tuple<int, int, int>, std::vector<Transfer>> sent, received;
          for (int st = 0; st < P; ++st)
            for (const Action& a : stage_actions(s, P, M, V, st)) {
              const int v = virtual_stage(s, P, st, a.chunk);
              auto at = [&](int u) { return stage_of(s, P, u); };
              // A hand-over within the stage (zb-v's bottom of the V) uses no link.
              if (a.kind == ActionKind::kForward) {
                if (v > 0 && at(v - 1) != st)
                  received[{0, at(v - 1), st}].push_back({v - 1, a.micro});
                if (v < K - 1 && at(v + 1) != st) sent[{0, st, at(v + 1)}].push_back({v, a.micro});
              } else if (a.kind != ActionKind::kBackwardWeight) {  // W sends nothing
                if (v < K - 1 && at(v + 1) != st)
                  received[{1, at(v + 1), st}].push_back({v, a.micro});
                if (v > 0 && at(v - 1) != st) sent[{1, st, at(v - 1)}].push_back({v - 1, a.micro});
              }
            }
          EXPECT_EQ(sent, received) << to_string(s) << " P=" << P << " M=" << M << " V=" << V;
          // Activations flow only to the next stage, gradients only to the previous one (the
          // links the channel makes); zb-v's second chunk runs the V back up, both ways.
          if (s == Schedule::kZbV) continue;
          for (const auto& [key, transfers] : sent) {
            const auto [kind, from, to] = key;
            EXPECT_EQ(to, kind == 0 ? (from + 1) % P : (from + P - 1) % P);
          }
        }
}

TEST(PipelineSchedule, SimulatedBubbleIsTheTheorysAndOneFOneBHoldsFewerMicroBatches) {
  for (int P : {2, 4})
    for (int M : {4, 8, 12}) {
      const auto gpipe = simulate_pipeline(Schedule::kGpipe, P, M, 1, 1.0, 2.0);
      const auto ofob = simulate_pipeline(Schedule::k1f1b, P, M, 1, 1.0, 2.0);
      for (int st = 0; st < P; ++st) {
        EXPECT_NEAR(gpipe.bubble()[st], theoretical_bubble(Schedule::kGpipe, P, M, 1), 1e-12);
        EXPECT_NEAR(ofob.bubble()[st], theoretical_bubble(Schedule::k1f1b, P, M, 1), 1e-12);
        EXPECT_EQ(gpipe.peak_in_flight[st], M);
        EXPECT_EQ(ofob.peak_in_flight[st], std::min(M, P - st));
      }
      // Interleaved: V chunks of 1/V the time each.
      for (int V : {2, 4}) {
        const auto il = simulate_pipeline(Schedule::kInterleaved, P, M, V, 1.0 / V, 2.0 / V);
        for (int st = 0; st < P; ++st)
          EXPECT_NEAR(il.bubble()[st], theoretical_bubble(Schedule::kInterleaved, P, M, V), 1e-9)
              << "P=" << P << " M=" << M << " V=" << V << " stage " << st;
      }
    }
}

// ZB-H1 (Qi et al. 2024, section 3.1): with F = B = W the bubble is (P - 1) / (3M + P - 1), a third
// of 1F1B's at a large M, every stage's W of a micro-batch runs after its own B, and a stage holds
// no more micro-batches between F and B than under 1F1B.
TEST(PipelineSchedule, ZeroBubbleH1SimulatesToItsTheory) {
  for (int P : {2, 3, 4})
    for (int M : {P, 2 * P, 3 * P}) {
      const auto zb = simulate_pipeline(Schedule::kZbH1, P, M, 1, PassTimes{1, 1, 1});
      ASSERT_FALSE(zb.deadlock);
      const double theory = theoretical_bubble(Schedule::kZbH1, P, M, 1);
      EXPECT_NEAR(theory, (P - 1.0) / (3.0 * M + P - 1), 1e-12);
      for (int st = 0; st < P; ++st) {
        EXPECT_NEAR(zb.bubble()[st], theory, 1e-12) << "P=" << P << " M=" << M << " stage " << st;
        EXPECT_LE(zb.peak_in_flight[st], std::min(M, P - st));
        std::set<int> inputs_done;
        for (const Action& a : stage_actions(Schedule::kZbH1, P, M, 1, st)) {
          if (a.kind == ActionKind::kBackwardInput) inputs_done.insert(a.micro);
          if (a.kind == ActionKind::kBackwardWeight) EXPECT_TRUE(inputs_done.contains(a.micro));
        }
      }
      // Against 1F1B with the same whole backward: less bubble whenever P > 1.
      const auto ofob = simulate_pipeline(Schedule::k1f1b, P, M, 1, PassTimes{1, 1, 1});
      EXPECT_LT(zb.makespan, ofob.makespan);
    }
  // Unequal times with W <= F: the simulation's bubble is still the paper's (P - 1)(F + B - W).
  for (PassTimes t : {PassTimes{1, 2, 1}, PassTimes{1, 1, 0.5}, PassTimes{2, 1, 1}})
    for (int P : {2, 4})
      for (int M : {P, 3 * P}) {
        const auto zb = simulate_pipeline(Schedule::kZbH1, P, M, 1, t);
        EXPECT_NEAR(zb.bubble()[0], theoretical_bubble(Schedule::kZbH1, P, M, 1, t), 1e-12)
            << "P=" << P << " M=" << M << " B=" << t.input << " W=" << t.weight;
      }
}

// ZB-V: stage s holds virtual stages s and 2P - 1 - s (the loss on stage 0); its order runs free of
// deadlock for any M, each W after its own B; with F = B = W (each chunk half of a stage's work)
// and M >= 2P - 1 the bubble time is (P - 1) / 2, half of ZB-H1's (P - 1).
TEST(PipelineSchedule, ZeroBubbleVHalvesZbH1sBubble) {
  for (int P : {2, 3, 4}) {
    EXPECT_EQ(virtual_stage(Schedule::kZbV, P, 0, 1), 2 * P - 1);
    EXPECT_EQ(stage_of(Schedule::kZbV, P, P), P - 1);
    for (int v = 0; v < 2 * P; ++v)
      EXPECT_EQ(virtual_stage(Schedule::kZbV, P, stage_of(Schedule::kZbV, P, v), v < P ? 0 : 1), v);
    for (int M = 1; M <= 3 * P; ++M) {
      const auto zbv = simulate_pipeline(Schedule::kZbV, P, M, 2, PassTimes{0.5, 0.5, 0.5});
      ASSERT_FALSE(zbv.deadlock) << "P=" << P << " M=" << M;
      for (int st = 0; st < P; ++st) {
        std::set<std::pair<int, int>> inputs_done;
        for (const Action& a : stage_actions(Schedule::kZbV, P, M, 2, st)) {
          if (a.kind == ActionKind::kBackwardInput) inputs_done.insert({a.micro, a.chunk});
          if (a.kind == ActionKind::kBackwardWeight)
            EXPECT_TRUE(inputs_done.contains({a.micro, a.chunk}));
        }
      }
      if (M < 2 * P - 1) continue;
      const double want = (P - 1) / 2.0 / (3.0 * M + (P - 1) / 2.0);
      for (double b : zbv.bubble()) EXPECT_NEAR(b, want, 1e-12) << "P=" << P << " M=" << M;
      EXPECT_NEAR(theoretical_bubble(Schedule::kZbV, P, M, 1), want, 1e-12);
      EXPECT_LT(want, theoretical_bubble(Schedule::kZbH1, P, M, 1));
    }
  }
}

// The mesh's layout, written out by hand for 8 ranks as dp2 x pp2 x tp2 would be once tp exists
// (and for the orders the pipeline uses today, dp4 x pp2): rank -> (tp, pp, dp).
TEST(MeshShape, CoordinatesAreTheRanksDigitsInnermostAxisFirst) {
  using A = std::array<int, kMeshAxes>;  // indexed tp, pp, dp
  auto shape = [](int tp, int pp, int dp, MeshOrder order) {
    MeshShape m;
    m.degree = {tp, pp, dp};
    m.order = order;
    return m;
  };
  const MeshOrder tp_pp_dp{MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp};
  const MeshOrder tp_dp_pp{MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp};
  const MeshOrder dp_pp_tp{MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kTp};
  // tp,pp,dp (the default, --pipeline-layout within-node): a pipeline is consecutive ranks.
  const std::vector<A> within = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1},
                                 {0, 0, 2}, {0, 1, 2}, {0, 0, 3}, {0, 1, 3}};
  // tp,dp,pp (across-nodes): a stage's data-parallel group is consecutive ranks.
  const std::vector<A> across = {{0, 0, 0}, {0, 0, 1}, {0, 0, 2}, {0, 0, 3},
                                 {0, 1, 0}, {0, 1, 1}, {0, 1, 2}, {0, 1, 3}};
  // dp2 x pp2 x tp2 in the order tp,pp,dp and in dp,pp,tp.
  const std::vector<A> tp_first = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                                   {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  const std::vector<A> dp_first = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                                   {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  const std::vector<std::pair<MeshShape, std::vector<A>>> cases = {
      {shape(1, 2, 4, tp_pp_dp), within},
      {shape(1, 2, 4, tp_dp_pp), across},
      {shape(2, 2, 2, tp_pp_dp), tp_first},
      {shape(2, 2, 2, dp_pp_tp), dp_first}};
  for (const auto& [m, want] : cases)
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(m.coords(r), want[static_cast<size_t>(r)]) << m.describe() << " rank " << r;
      EXPECT_EQ(m.rank(want[static_cast<size_t>(r)]), r) << m.describe();
    }
}

TEST(MeshShape, EveryOrderPlacesEveryRankOnce) {
  std::vector<MeshAxis> axes{MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp};
  std::sort(axes.begin(), axes.end());
  do {
    for (int world : {1, 4, 8, 12})
      for (int pp : {1, 2, 4}) {
        if (world % pp) continue;
        const MeshShape m = make_mesh_shape(world, 1, pp, {axes[0], axes[1], axes[2]});
        EXPECT_EQ(m[MeshAxis::kDp], world / pp);
        std::set<std::array<int, kMeshAxes>> seen;
        for (int r = 0; r < world; ++r) {
          EXPECT_TRUE(seen.insert(m.coords(r)).second);
          EXPECT_EQ(m.rank(m.coords(r)), r);
        }
      }
  } while (std::next_permutation(axes.begin(), axes.end()));
}

TEST(MeshShape, BadDegreesAndOrdersAreRefusedNamingTheFlag) {
  EXPECT_THROW(make_mesh_shape(4, 1, 3, kDefaultMeshOrder), UsageError);
  EXPECT_EQ(to_string(parse_mesh_order("dp,tp,pp")),
            to_string(MeshOrder{MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp}));
  for (const char* bad :
       {"", "tp,pp", "tp,pp,dp,", "tp,pp,pp", "tp,pp,dp,tp", "tp,pp,ep", "tp,,dp"})
    EXPECT_THROW(parse_mesh_order(bad), UsageError) << bad;
  EXPECT_EQ(make_mesh_shape(8, 1, 2, kDefaultMeshOrder).describe(), "dp4 x pp2 (order tp,pp,dp)");
  EXPECT_EQ(make_mesh_shape(1, 1, 1, kDefaultMeshOrder).describe(), "dp1 (order tp,pp,dp)");
}

}  // namespace
}  // namespace dtune::train
