// --profile-steps with --pipeline-stages > 1: every stage's forwards, backwards, sends and waits of
// the profiled steps, gathered to rank 0 and written as one Chrome trace with one row per stage
// (DIR/pipeline/pipeline.trace.json: a process per pipeline, a thread per stage), the schedule
// diagram people know, on stage 0's clock. Each rank's own trace (rank<r>.pt.trace.json) carries
// the same spans on its row "pipeline stage S". Torch-free.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace dtune::train {

// kBackward is a whole backward, or B of a zero-bubble schedule; kBackwardWeight is its W.
enum class StageActivity {
  kForward = 0,
  kBackward = 1,
  kSend = 2,
  kRecvWait = 3,
  kSendWait = 4,
  kBackwardWeight = 5
};
const char* to_string(StageActivity a);

// One span of a stage; times in microseconds on stage 0's steady clock (the step's common origin
// plus the time since it on this rank's clock; equal to this rank's clock on stage 0's node).
struct StageSpan {
  StageActivity activity = StageActivity::kForward;
  int step = 0;
  int micro = -1;  // -1: not one micro-batch's (the wait for the sends at the end)
  int chunk = 0;   // virtual stage (interleaved); 0 otherwise
  int peer = -1;   // the stage sent to or waited for; -1: none
  double start_us = 0, end_us = 0;
};

struct StagePlace {
  int rank = 0, stage = 0, dp_index = 0;
};

// Collective over `comm`; rank 0 receives every rank's spans and writes `path` (creating its
// directory); the others return at once after sending. Throws dtune::Error when it cannot write.
void gather_pipeline_trace(MPI_Comm comm, const StagePlace& mine,
                           const std::vector<StageSpan>& spans, const std::string& path);

}  // namespace dtune::train
