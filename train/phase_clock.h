// Where a training step's time goes. mark(phase) closes the interval that started at the previous
// mark (or begin_step) and adds it to `phase`; micro-steps add up. The CPU clock reads the steady
// clock; the CUDA clock records events on its device's current stream and reads them once at the
// end of the step, so timing never adds a synchronisation inside the step.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "train/telemetry/trace_log.h"

namespace dtune::train {

enum class Phase { kData, kH2D, kForward, kBackward, kComm, kOptimizer, kScaler, kCount };
inline constexpr size_t kPhases = static_cast<size_t>(Phase::kCount);
// HDF5 dataset names, in Phase order.
inline constexpr std::array<const char*, kPhases> kPhaseNames = {
    "data_ms",         "h2d_ms",       "forward_ms", "backward_ms",
    "comm_exposed_ms", "optimizer_ms", "scaler_ms"};

using PhaseTimes = std::array<double, kPhases>;  // milliseconds

class PhaseClock {
 public:
  virtual ~PhaseClock() = default;
  virtual void begin_step() = 0;
  virtual void mark(Phase p) = 0;
  // Per-phase milliseconds of the step, and the step's total (first begin to last mark).
  virtual PhaseTimes end_step(double& total_ms) = 0;
};

std::unique_ptr<PhaseClock> make_cpu_clock();
// Measures only each step's total (phases stay zero): the bare loop of --timing off.
std::unique_ptr<PhaseClock> make_total_only_clock(std::unique_ptr<PhaseClock> inner);
// --profile-steps: also records each phase interval as a span in `log` while it is enabled
// (CPU-side times: on a GPU they show when the host issued the work).
std::unique_ptr<PhaseClock> make_traced_clock(std::unique_ptr<PhaseClock> inner, TraceLog& log);
// Times the current stream of GPU `device` (the rank's). Defined in phase_clock_cuda.cc when built
// with CUDA; otherwise throws UsageError.
std::unique_ptr<PhaseClock> make_cuda_clock(int device);

}  // namespace dtune::train
