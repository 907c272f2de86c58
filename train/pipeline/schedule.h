// Pipeline schedules as each stage's ordered list of actions (forward or backward of one
// micro-batch through one of its model chunks), the orders GPipe, 1F1B (PipeDream-Flush, Narayanan
// et al. 2021), Megatron-LM's interleaved 1F1B and the zero-bubble ZB-H1 (Qi et al. 2024) define;
// and a simulator that runs those lists against their dependencies with given pass times, which
// proves them free of deadlock and gives each schedule's theoretical bubble. Pure: unit-tested.
#pragma once

#include <vector>

#include "train/config.h"

namespace dtune::train {

// kBackward is the whole backward of a chunk. The zero-bubble schedules split it in two:
// kBackwardInput (B: the gradient of the chunk's input, which the previous stage waits for, and
// of every parameter whose gradient is cheap) and kBackwardWeight (W: the linear layers' weight
// gradients, which nothing downstream waits for, deferred into what would be the bubble).
enum class ActionKind { kForward, kBackward, kBackwardInput, kBackwardWeight };

struct Action {
  ActionKind kind;
  int micro;  // micro-batch, 0..M-1
  int chunk;  // this stage's model chunk, 0..V-1: virtual stage chunk x P + stage
};

// Stage `stage` of P, M micro-batches, V chunks per stage (1 unless interleaved).
//   GPipe: every forward, then every backward (M micro-batches in flight).
//   1F1B: P - stage - 1 warm-up forwards, then one forward and one backward in turn, then the
//     remaining backwards (at most P - stage micro-batches in flight).
//   interleaved: Megatron-LM's order (schedules.py, forward_backward_pipelining_with_interleaving):
//     warm-up (P - stage - 1) x 2 + (V - 1) x P forwards, micro-batches in groups of P per chunk.
//     Needs M a multiple of P.
//   zb-h1: 1F1B's order with each backward split into B and W, stage s running the W of a
//     micro-batch right after the next B once s B's are done (torch.distributed.pipelining's
//     _get_1f1b_rank_ops with enable_zero_bubble): the last stage, idle at the end under 1F1B,
//     fills that time with its deferred W's. The same micro-batches in flight as 1F1B.
//   zb-v: the zero-bubble paper's ZB-V (section 6), two chunks per stage placed as a V: stage s
//     holds virtual stages s and 2P - 1 - s, so the first stage computes the loss and the last
//     stage hands its first chunk's output to its own second chunk; the order is
//     torch.distributed.pipelining's ScheduleZBVZeroBubble (warm-up forwards, then F B W of each
//     chunk in turn, W's closing), its actions for micro-batches beyond M dropped (it plans at
//     least 2P - 1).
std::vector<Action> stage_actions(Schedule schedule, int P, int M, int V, int stage);

// Chunks per stage a schedule runs: V interleaved, 2 under zb-v, 1 otherwise.
int chunks_per_stage(Schedule schedule, int V);
// The virtual stage of a stage's chunk (chunk x P + stage; zb-v's V: stage, then 2P - 1 - stage)
// and the stage that holds virtual stage v.
int virtual_stage(Schedule schedule, int P, int stage, int chunk);
int stage_of(Schedule schedule, int P, int v);

struct SimulatedPipeline {
  bool deadlock = false;
  double makespan = 0;              // time units from the first forward to the last backward
  std::vector<double> busy;         // per stage: time spent in forwards and backwards
  std::vector<int> peak_in_flight;  // per stage: most micro-batch chunks forwarded, not backwarded
  std::vector<double> bubble() const;  // per stage: 1 - busy / makespan
};

// A chunk's pass times: the forward, the input half of the backward (B) and the weight half (W); a
// whole backward takes input + weight.
struct PassTimes {
  double forward = 1, input = 1, weight = 1;
};

// Runs every stage's actions in order, each as soon as its inputs exist (a forward needs the
// previous virtual stage's forward of the same micro-batch, a backward or B the next virtual
// stage's backward or B and its own forward, a W its own B), with the given times per chunk and
// free communication.
SimulatedPipeline simulate_pipeline(Schedule schedule, int P, int M, int V, PassTimes t);
// The same with a whole backward of `backward` (split evenly into B and W where a schedule splits).
SimulatedPipeline simulate_pipeline(Schedule schedule, int P, int M, int V, double forward,
                                    double backward);

// The bubble fraction the schedule's theory gives: (P - 1) / (M + P - 1) for GPipe and 1F1B,
// (P - 1) / (V M + P - 1) interleaved (Narayanan et al. 2021, section 2.2); ZB-H1's bubble time
// is (P - 1)(F + B - W) against M(F + B + W) of work (Qi et al. 2024, section 3.1), with the
// times `t` of a stage's whole work per micro-batch (the paper's F = B = W by default:
// (P - 1) / (3M + P - 1); the simulation agrees while W <= F). ZB-V's is its order's simulated
// bubble with each chunk taking half of `t`: (P - 1) B / 2 of bubble time for M >= 2P - 1 and
// W <= F, so (P - 1) / 2 / (3M + (P - 1) / 2) at F = B = W. (The paper's ZB-V reaches zero at
// F = B = W with its own search-built order; this is torch.distributed.pipelining's.)
double theoretical_bubble(Schedule schedule, int P, int M, int V, PassTimes t = {});

}  // namespace dtune::train
