// Wall-clock timing on the host: a steady clock (never adjusted), microsecond results.
// Device phases are timed with CUDA events instead (core/cuda/cuda_handles.h).
#pragma once

#include <chrono>

#include "core/deadline.h"

namespace dtune {

class Stopwatch {
 public:
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

}  // namespace dtune
