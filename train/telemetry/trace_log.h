// dtune's own timeline events for --profile-steps: the phase of each step (as the phase clock
// marks it) and each gradient-bucket reduction (as the communication thread runs it), recorded on
// the steady clock while a profile window is open and merged into the per-rank Chrome trace
// (chrome_trace.h), so the timeline shows how communication overlaps compute; in a pipeline, the
// stage's own actions (train/pipeline/pipeline_trace.h). Outside a window
// add() is one relaxed atomic load. Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dtune::train {

// Synthetic timeline rows ("threads" in the trace) that dtune's events go on. kPipeline: a
// pipeline stage's forwards, backwards, sends and waits per micro-batch (--pipeline-stages > 1).
enum class TraceTrack { kPhases = 0, kReductions = 1, kPipeline = 2 };

struct TraceSpan {
  std::string name;
  TraceTrack track = TraceTrack::kPhases;
  std::chrono::steady_clock::time_point start, end;
  std::vector<std::pair<std::string, int64_t>> args;  // e.g. {"bucket", 3}, {"bytes", 1048576}
};

class TraceLog {
 public:
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Thread-safe; dropped unless enabled.
  void add(TraceSpan span) {
    if (!enabled()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    spans_.push_back(std::move(span));
  }
  std::vector<TraceSpan> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(spans_, {});
  }

 private:
  std::atomic<bool> enabled_{false};
  std::mutex mutex_;
  std::vector<TraceSpan> spans_;
};

}  // namespace dtune::train
