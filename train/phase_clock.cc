// Steady-clock phase timing.
#include "train/phase_clock.h"

#include <chrono>

namespace dtune::train {
namespace {

class CpuClock final : public PhaseClock {
 public:
  void begin_step() override {
    times_.fill(0);
    start_ = last_ = std::chrono::steady_clock::now();
  }
  void mark(Phase p) override {
    const auto now = std::chrono::steady_clock::now();
    times_[static_cast<size_t>(p)] +=
        std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  PhaseTimes end_step(double& total_ms) override {
    total_ms = std::chrono::duration<double, std::milli>(last_ - start_).count();
    return times_;
  }

 private:
  PhaseTimes times_{};
  std::chrono::steady_clock::time_point start_, last_;
};

class TracedClock final : public PhaseClock {
 public:
  TracedClock(std::unique_ptr<PhaseClock> inner, TraceLog& log)
      : inner_(std::move(inner)), log_(log) {}
  void begin_step() override {
    inner_->begin_step();
    last_ = std::chrono::steady_clock::now();
  }
  void mark(Phase p) override {
    inner_->mark(p);
    if (!log_.enabled()) return;
    const auto now = std::chrono::steady_clock::now();
    std::string name = kPhaseNames[static_cast<size_t>(p)];
    log_.add({name.substr(0, name.size() - 3),
              TraceTrack::kPhases,
              last_,
              now,
              {}});  // "forward_ms" -> "forward"
    last_ = now;
  }
  PhaseTimes end_step(double& total_ms) override { return inner_->end_step(total_ms); }

 private:
  std::unique_ptr<PhaseClock> inner_;
  TraceLog& log_;
  std::chrono::steady_clock::time_point last_;
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

 private:
  std::unique_ptr<PhaseClock> inner_;
};

}  // namespace

std::unique_ptr<PhaseClock> make_total_only_clock(std::unique_ptr<PhaseClock> inner) {
  return std::make_unique<TotalOnlyClock>(std::move(inner));
}

std::unique_ptr<PhaseClock> make_cpu_clock() { return std::make_unique<CpuClock>(); }

std::unique_ptr<PhaseClock> make_traced_clock(std::unique_ptr<PhaseClock> inner, TraceLog& log) {
  return std::make_unique<TracedClock>(std::move(inner), log);
}

}  // namespace dtune::train
