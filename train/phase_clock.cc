// Phase timing over a DeviceTimeline: each mark closes a phase's interval.
#include "train/phase_clock.h"

#include <vector>

namespace dtune::train {
namespace {

class TimelineClock final : public PhaseClock {
 public:
  explicit TimelineClock(std::unique_ptr<DeviceTimeline> timeline)
      : timeline_(std::move(timeline)) {}
  void begin_step() override {
    start_ = Clock::now();
    timeline_->begin(start_);
    marks_.clear();
  }
  void mark(Phase p) override {
    timeline_->mark();
    marks_.push_back(p);
  }
  PhaseTimes end_step(double& total_ms) override {
    PhaseTimes t{};
    const std::vector<double> ms = timeline_->read_ms();
    intervals_.clear();
    double last = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      t[static_cast<size_t>(marks_[i])] += ms[i] - last;
      intervals_.push_back({marks_[i], last, ms[i]});
      last = ms[i];
    }
    total_ms = last;
    return t;
  }
  const std::vector<PhaseInterval>& intervals() const override { return intervals_; }
  Clock::time_point step_start() const override { return start_; }

 private:
  std::unique_ptr<DeviceTimeline> timeline_;
  std::vector<Phase> marks_;
  std::vector<PhaseInterval> intervals_;
  Clock::time_point start_;
};

// The step's phases as spans of the trace, placed at the times the timeline read (on a GPU, when
// the device ran them, not when the host queued them).
class TracedClock final : public PhaseClock {
 public:
  TracedClock(std::unique_ptr<PhaseClock> inner, TraceLog& log)
      : inner_(std::move(inner)), log_(log) {}
  void begin_step() override { inner_->begin_step(); }
  void mark(Phase p) override { inner_->mark(p); }
  PhaseTimes end_step(double& total_ms) override {
    PhaseTimes t = inner_->end_step(total_ms);
    if (!log_.enabled()) return t;
    const Clock::time_point start = inner_->step_start();
    auto at = [&](double ms) {
      return start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::milli>(ms));
    };
    for (const PhaseInterval& i : inner_->intervals()) {
      const std::string name = kPhaseNames[static_cast<size_t>(i.phase)];
      // "forward_ms" -> "forward"
      log_.add(
          {name.substr(0, name.size() - 3), TraceTrack::kPhases, at(i.begin_ms), at(i.end_ms), {}});
    }
    return t;
  }
  const std::vector<PhaseInterval>& intervals() const override { return inner_->intervals(); }
  Clock::time_point step_start() const override { return inner_->step_start(); }

 private:
  std::unique_ptr<PhaseClock> inner_;
  TraceLog& log_;
};

class TotalOnlyClock final : public PhaseClock {
 public:
  explicit TotalOnlyClock(std::unique_ptr<PhaseClock> inner) : inner_(std::move(inner)) {}
  void begin_step() override { inner_->begin_step(); }
  void mark(Phase) override {}
  PhaseTimes end_step(double& total_ms) override {
    inner_->mark(Phase::kOptimizer);  // closes the total at the end of the step
    inner_->end_step(total_ms);
    return PhaseTimes{};
  }
  const std::vector<PhaseInterval>& intervals() const override { return none_; }
  Clock::time_point step_start() const override { return inner_->step_start(); }

 private:
  std::unique_ptr<PhaseClock> inner_;
  std::vector<PhaseInterval> none_;
};

}  // namespace

std::unique_ptr<PhaseClock> make_phase_clock(std::unique_ptr<DeviceTimeline> timeline) {
  return std::make_unique<TimelineClock>(std::move(timeline));
}

std::unique_ptr<PhaseClock> make_total_only_clock(std::unique_ptr<PhaseClock> inner) {
  return std::make_unique<TotalOnlyClock>(std::move(inner));
}

std::unique_ptr<PhaseClock> make_traced_clock(std::unique_ptr<PhaseClock> inner, TraceLog& log) {
  return std::make_unique<TracedClock>(std::move(inner), log);
}

}  // namespace dtune::train
