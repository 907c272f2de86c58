// What one rank measured of its pipeline stage (train/pipeline/pipeline_step.h), kept beside the
// step records as the pipeline's mode results and gathered by rank 0 (pipeline_results.h):
// per measured step the time in forwards, backwards, waits for a neighbour's activation or
// gradient, waits for sends to complete, and idle time; the measured bubble; peak activation
// memory; and one step's timeline (what the report draws).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtune::train {

// One forward or backward of one micro-batch through one chunk, in ms from the step's start.
struct PipelineEvent {
  int backward = 0;  // 0 forward, 1 backward (B in a zero-bubble schedule), 2 its W
  int micro = 0;
  int chunk = 0;
  double start_ms = 0, end_ms = 0;
};

struct PipelineStepTimes {
  double forward_ms = 0, backward_ms = 0;  // compute
  double recv_wait_ms = 0;                 // blocked on a neighbour's activation or gradient
  double send_wait_ms = 0;                 // blocked until this stage's sends completed
  double span_ms = 0;  // the pipeline's flush: first forward anywhere to last backward anywhere
  double bubble = 0;   // 1 - (forward + backward) / span
  int64_t peak_activation_bytes = 0;  // device tensors held above the step's start, at their peak
  // fp16 loss scaling: the scale this stage used, whether its own gradients (agreed over its
  // data-parallel group) held inf/NaN, and whether the step was skipped (agreed over the stages).
  double loss_scale = 1;
  int found_inf = 0, skipped = 0;
};

struct PipelineStats {
  int stages = 0;  // 0: not a pipeline run
  int stage = 0, dp_index = 0;
  std::string cuts;          // every chunk's pieces, "embed,h.0 | h.1,head" (partition.h)
  std::string partitioned;   // "flops" or "measured", with the chunk costs
  double planned_share = 0;  // this stage's chunks' share of the plan's cost, all chunks' 1
  double theory_bubble = 0;
  std::string channel;  // how the stages' tensors travel: "mpi" or "nccl" (pipeline_channel.h)
  std::vector<PipelineStepTimes> steps;  // every step, warm-up included
  std::vector<PipelineEvent> timeline;   // the last step's
};

}  // namespace dtune::train
