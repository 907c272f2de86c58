// The schedules' action orders and their simulation.
#include "train/pipeline/schedule.h"

#include <algorithm>
#include <map>

namespace dtune::train {
namespace {

std::vector<Action> one_f_one_b(int warmup, int total, auto forward_at, auto backward_at) {
  std::vector<Action> out;
  warmup = std::min(warmup, total);
  for (int k = 0; k < warmup; ++k) out.push_back(forward_at(k));
  for (int k = warmup; k < total; ++k) {
    out.push_back(forward_at(k));
    out.push_back(backward_at(k - warmup));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(backward_at(k));
  return out;
}

// ZB-H1 for one chunk per stage: 1F1B with B for the whole backward, and after the j-th B (from
// 0) the oldest pending W once j >= delay; the W's still pending close the list.
std::vector<Action> zero_bubble_h1(int P, int M, int stage) {
  std::vector<Action> out;
  const int warmup = std::min(P - stage - 1, M), delay = stage;
  int b = 0, w = 0;
  auto backward = [&] {
    out.push_back({ActionKind::kBackwardInput, b, 0});
    if (b++ >= delay) out.push_back({ActionKind::kBackwardWeight, w++, 0});
  };
  for (int k = 0; k < warmup; ++k) out.push_back({ActionKind::kForward, k, 0});
  for (int k = warmup; k < M; ++k) {
    out.push_back({ActionKind::kForward, k, 0});
    backward();
  }
  while (b < M) backward();
  while (w < M) out.push_back({ActionKind::kBackwardWeight, w++, 0});
  return out;
}

// ZB-V as torch.distributed.pipelining's ScheduleZBVZeroBubble orders it (chunk 0 is virtual
// stage `stage`, chunk 1 virtual stage 2P - 1 - stage), for max(M, 2P - 1) micro-batches, those
// beyond M then dropped.
std::vector<Action> zero_bubble_v(int P, int M, int stage) {
  const int n = std::max(M, 2 * P - 1);
  std::vector<Action> out;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  auto add = [&](ActionKind kind, int micro, int chunk) {
    if (micro < M) out.push_back({kind, micro, chunk});
  };
  const auto F = ActionKind::kForward, B = ActionKind::kBackwardInput,
             W = ActionKind::kBackwardWeight;
  for (int k = 0; k < 2 * (P - stage) - 1; ++k) add(F, f0++, 0);
  for (int k = 0; k < stage; ++k) {
    add(F, f1++, 1);
    add(F, f0++, 0);
  }
  for (int k = 0; k < P - stage; ++k) {
    add(F, f1++, 1);
    add(B, b1, 1);
    add(W, b1++, 1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(F, f0++, 0);
    add(B, b0, 0);
    add(W, b0++, 0);
    add(F, f1++, 1);
    add(B, b1, 1);
    add(W, b1++, 1);
  }
  int w0 = b0, w1 = b1;
  for (int k = 0; k < stage; ++k) {
    add(B, b0++, 0);
    add(B, b1++, 1);
  }
  for (int k = 0; k < P - stage; ++k) {
    add(B, b0++, 0);
    add(W, w0++, 0);
  }
  while (w1 < b1) add(W, w1++, 1);
  while (w0 < b0) add(W, w0++, 0);
  return out;
}

}  // namespace

int chunks_per_stage(Schedule schedule, int V) {
  return schedule == Schedule::kInterleaved ? V : schedule == Schedule::kZbV ? 2 : 1;
}

int virtual_stage(Schedule schedule, int P, int stage, int chunk) {
  if (schedule == Schedule::kZbV) return chunk == 0 ? stage : 2 * P - 1 - stage;
  return chunk * P + stage;
}

int stage_of(Schedule schedule, int P, int v) {
  if (schedule == Schedule::kZbV) return v < P ? v : 2 * P - 1 - v;
  return v % P;
}

std::vector<Action> stage_actions(Schedule schedule, int P, int M, int V, int stage) {
  std::vector<Action> out;
  if (schedule == Schedule::kZbH1) return zero_bubble_h1(P, M, stage);
  if (schedule == Schedule::kZbV) return zero_bubble_v(P, M, stage);
  if (schedule == Schedule::kGpipe) {
    for (int m = 0; m < M; ++m) out.push_back({ActionKind::kForward, m, 0});
    for (int m = 0; m < M; ++m) out.push_back({ActionKind::kBackward, m, 0});
    return out;
  }
  if (schedule == Schedule::k1f1b)
    return one_f_one_b(
        P - stage - 1, M,
        [](int k) {
          return Action{ActionKind::kForward, k, 0};
        },
        [](int k) {
          return Action{ActionKind::kBackward, k, 0};
        });
  // Interleaved: micro-step k of this stage runs micro-batch (k / PV) P + k mod P through chunk
  // (k mod PV) / P, forwards in chunk order, backwards in reverse chunk order.
  const int group = P * V, total = M * V;
  auto micro = [=](int k) { return (k / group) * P + k % P; };
  auto fwd = [=](int k) { return Action{ActionKind::kForward, micro(k), (k % group) / P}; };
  auto bwd = [=](int k) {
    return Action{ActionKind::kBackward, micro(k), V - 1 - (k % group) / P};
  };
  const int warmup = M == P ? total : (P - stage - 1) * 2 + (V - 1) * P;
  return one_f_one_b(warmup, total, fwd, bwd);
}

std::vector<double> SimulatedPipeline::bubble() const {
  std::vector<double> out;
  for (double b : busy) out.push_back(makespan > 0 ? 1 - b / makespan : 0);
  return out;
}

SimulatedPipeline simulate_pipeline(Schedule schedule, int P, int M, int V, double forward,
                                    double backward) {
  return simulate_pipeline(schedule, P, M, V, {forward, backward / 2, backward / 2});
}

SimulatedPipeline simulate_pipeline(Schedule schedule, int P, int M, int V, PassTimes t) {
  V = chunks_per_stage(schedule, V);
  const int K = P * V;  // virtual stages
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < P; ++s) lists.push_back(stage_actions(schedule, P, M, V, s));
  // done[(pass, virtual stage, micro)] = finish time; pass 0 forward, 1 the input gradient (B or
  // a whole backward), 2 the weight gradients (W or a whole backward).
  std::map<std::tuple<int, int, int>, double> done;
  SimulatedPipeline sim;
  sim.busy.assign(P, 0);
  sim.peak_in_flight.assign(P, 0);
  std::vector<size_t> next(P, 0);
  std::vector<double> free_at(P, 0);
  std::vector<int> in_flight(P, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (next[s] < lists[s].size()) {
        const Action& a = lists[s][next[s]];
        const int v = virtual_stage(schedule, P, s, a.chunk);
        double ready = free_at[s];
        const bool fwd = a.kind == ActionKind::kForward;
        const bool weight = a.kind == ActionKind::kBackwardWeight;
        std::vector<std::tuple<int, int, int>> deps;
        if (fwd && v > 0) deps.push_back({0, v - 1, a.micro});
        if (weight) deps.push_back({1, v, a.micro});
        if (!fwd && !weight) deps.push_back({0, v, a.micro});
        if (!fwd && !weight && v < K - 1) deps.push_back({1, v + 1, a.micro});
        bool ok = true;
        for (const auto& d : deps) {
          auto it = done.find(d);
          if (it == done.end()) {
            ok = false;
            break;
          }
          ready = std::max(ready, it->second);
        }
        if (!ok) break;
        const double d = fwd                                    ? t.forward
                         : a.kind == ActionKind::kBackward      ? t.input + t.weight
                         : a.kind == ActionKind::kBackwardInput ? t.input
                                                                : t.weight;
        free_at[s] = ready + d;
        sim.busy[s] += d;
        if (fwd) done[{0, v, a.micro}] = free_at[s];
        if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput)
          done[{1, v, a.micro}] = free_at[s];
        if (a.kind == ActionKind::kBackward || weight) done[{2, v, a.micro}] = free_at[s];
        // In flight: forwarded and not yet through B (W keeps only its layers' inputs and
        // output gradients).
        if (!weight) in_flight[s] += fwd ? 1 : -1;
        sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], in_flight[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; ++s) sim.deadlock |= next[s] < lists[s].size();
  sim.makespan = *std::max_element(free_at.begin(), free_at.end());
  return sim;
}

double theoretical_bubble(Schedule schedule, int P, int M, int V, PassTimes t) {
  if (schedule == Schedule::kZbH1) {
    const double bubble = (P - 1) * std::max(0.0, t.forward + t.input - t.weight);
    return bubble / (M * (t.forward + t.input + t.weight) + bubble);
  }
  if (schedule == Schedule::kZbV) {
    const auto b =
        simulate_pipeline(schedule, P, M, 2, {t.forward / 2, t.input / 2, t.weight / 2}).bubble();
    double sum = 0;
    for (double x : b) sum += x;
    return sum / P;
  }
  const double v = schedule == Schedule::kInterleaved ? V : 1;
  return (P - 1) / (v * M + P - 1);
}

}  // namespace dtune::train
