// Where a training step's time goes. mark(phase) closes the interval that started at the previous
// mark (or begin_step) and adds it to `phase`; micro-steps add up. The marks are a DeviceTimeline's
// (train/device_timeline.h): steady-clock readings on the CPU, CUDA events on the rank's device's
// current stream on a GPU, read once at the end of the step, so timing never adds a
// synchronisation inside the step.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "train/device_timeline.h"
#include "train/telemetry/trace_log.h"

namespace dtune::train {

enum class Phase { kData, kH2D, kForward, kBackward, kComm, kOptimizer, kScaler, kCount };
inline constexpr size_t kPhases = static_cast<size_t>(Phase::kCount);
// HDF5 dataset names, in Phase order.
inline constexpr std::array<const char*, kPhases> kPhaseNames = {
    "data_ms",         "h2d_ms",       "forward_ms", "backward_ms",
    "comm_exposed_ms", "optimizer_ms", "scaler_ms"};

using PhaseTimes = std::array<double, kPhases>;  // milliseconds

// One interval of the last step, in ms from its begin_step.
struct PhaseInterval {
  Phase phase;
  double begin_ms, end_ms;
};

class PhaseClock {
 public:
  virtual ~PhaseClock() = default;
  virtual void begin_step() = 0;
  virtual void mark(Phase p) = 0;
  // Per-phase milliseconds of the step, and the step's total (first begin to last mark).
  virtual PhaseTimes end_step(double& total_ms) = 0;
  // The last ended step's intervals in order, and the host time its begin_step was called.
  virtual const std::vector<PhaseInterval>& intervals() const = 0;
  virtual Clock::time_point step_start() const = 0;
};

// Phases over `timeline`: make_timeline(-1) on the CPU, make_timeline(ordinal) on GPU `ordinal`.
std::unique_ptr<PhaseClock> make_phase_clock(std::unique_ptr<DeviceTimeline> timeline);
// Measures only each step's total (phases stay zero): the bare loop of --timing off.
std::unique_ptr<PhaseClock> make_total_only_clock(std::unique_ptr<PhaseClock> inner);
// --profile-steps: also records each phase interval as a span in `log` while it is enabled, at the
// timeline's times (on a GPU, when the device ran the phase).
std::unique_ptr<PhaseClock> make_traced_clock(std::unique_ptr<PhaseClock> inner, TraceLog& log);

}  // namespace dtune::train
