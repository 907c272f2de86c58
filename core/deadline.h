// Deadlines: the one clock every wait in dtune is measured on (steady, never adjusted), a point on
// it past which a wait gives up, and DeadlineGuard, which arms a Watchdog (core/watchdog.h) for a
// blocking wait that cannot check a deadline itself and disarms it however the scope is left.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>

namespace dtune {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  // `seconds` from now (fractions kept to the clock's resolution).
  static Deadline after_s(double seconds) {
    return Deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(seconds)));
  }

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  // Time left, zero once expired.
  Clock::duration remaining() const {
    return std::max(Clock::duration::zero(), at_ - Clock::now());
  }

 private:
  Clock::time_point at_;
};

class Watchdog;

// Arms `watchdog` for `timeout_s` seconds, waiting for `what` (the watchdog's message names it),
// and disarms it when the scope ends, by return or by exception: a wait that threw (a TimeoutError
// from a backend's own deadline) leaves no watchdog armed behind it.
class DeadlineGuard {
 public:
  DeadlineGuard(Watchdog& watchdog, double timeout_s, std::string what);
  DeadlineGuard(const DeadlineGuard&) = delete;
  DeadlineGuard& operator=(const DeadlineGuard&) = delete;
  ~DeadlineGuard();

 private:
  Watchdog& watchdog_;
};

}  // namespace dtune
