// Pipeline schedules as each stage's ordered list of actions (forward or backward of one
// micro-batch through one of its model chunks), the orders GPipe, 1F1B (PipeDream-Flush, Narayanan
// et al. 2021) and Megatron-LM's interleaved 1F1B define; and a simulator that runs those lists
// against their dependencies with given forward/backward times, which proves them free of deadlock
// and gives each schedule's theoretical bubble. Pure: unit-tested.
#pragma once

#include <vector>

#include "train/config.h"

namespace dtune::train {

enum class ActionKind { kForward, kBackward };

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
std::vector<Action> stage_actions(Schedule schedule, int P, int M, int V, int stage);

struct SimulatedPipeline {
  bool deadlock = false;
  double makespan = 0;              // time units from the first forward to the last backward
  std::vector<double> busy;         // per stage: time spent in forwards and backwards
  std::vector<int> peak_in_flight;  // per stage: most micro-batch chunks forwarded, not backwarded
  std::vector<double> bubble() const;  // per stage: 1 - busy / makespan
};

// Runs every stage's actions in order, each as soon as its inputs exist (a forward needs the
// previous virtual stage's forward of the same micro-batch, a backward the next virtual stage's
// backward), with `forward` and `backward` time per chunk and free communication.
SimulatedPipeline simulate_pipeline(Schedule schedule, int P, int M, int V, double forward,
                                    double backward);

// The bubble fraction the schedule's theory gives: (P - 1) / (M + P - 1) for GPipe and 1F1B,
// (P - 1) / (V M + P - 1) interleaved (Narayanan et al. 2021, section 2.2).
double theoretical_bubble(Schedule schedule, int P, int M, int V);

}  // namespace dtune::train
