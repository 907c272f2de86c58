// Wall-clock timing on the host: a steady clock (never adjusted), microsecond results.
// Device phases are timed with CUDA events instead (core/cuda/cuda_handles.h).
#pragma once

#include <chrono>

namespace dtune {

class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;
  Stopwatch() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double elapsed_us() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - start_).count();
  }
  double elapsed_ms() const { return elapsed_us() * 1e-3; }
  double elapsed_s() const { return elapsed_us() * 1e-6; }

 private:
  Clock::time_point start_;
};

inline std::chrono::steady_clock::time_point deadline_after_s(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(seconds));
}

}  // namespace dtune
