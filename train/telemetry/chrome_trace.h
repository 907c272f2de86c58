// Finishing the Chrome-trace JSON that the Kineto profiler writes for a --profile-steps window:
// adds the rank metadata Holistic Trace Analysis reads ("distributedInfo": rank, world_size,
// backend), dtune's own run metadata, and dtune's phase and bucket-reduction spans (trace_log.h)
// as complete ("X") events on two named rows of the process (a third, "pipeline stage S", in a
// pipeline). Kineto's timestamps are microseconds
// on its own clock; dtune's spans are on the steady clock, so the offset between them is taken
// from the ProfilerStep#N annotation whose opening dtune bracketed most tightly (a thread
// preempted while opening one would otherwise shift every span). Torch-free.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "train/telemetry/trace_log.h"

namespace dtune::train {

struct TraceRankInfo {
  int rank = 0;
  int world_size = 1;
  std::string backend;                       // "nccl" or "mpi"
  std::map<std::string, std::string> extra;  // under "dtune" at the top level
  int pipeline_stage = -1;                   // names the kPipeline row; -1: not a pipeline
};

// When a step's ProfilerStep#step annotation was opened, on the steady clock: read just before and
// just after the call that opens it (the trace's start lies between).
struct StepAnchor {
  std::chrono::steady_clock::time_point before, after;
};
using StepAnchors = std::map<int, StepAnchor>;

// Rewrites `path` in place. Throws dtune::Error when the file is not a Chrome trace or holds no
// ProfilerStep annotation to align with.
void finish_chrome_trace(const std::string& path, const TraceRankInfo& info,
                         const std::vector<TraceSpan>& spans, const StepAnchors& anchors);

// Row ("tid") numbers for dtune's tracks: above Linux's largest thread id (2^22), so they never
// collide with a real thread.
inline constexpr int64_t kTraceTrackTidBase = (int64_t{1} << 22) + 1;

}  // namespace dtune::train
