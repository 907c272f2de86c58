// The one way dtune times work that may run on a device: points marked on the stream that runs the
// work, read once after the work is done. On the CPU a mark is a steady-clock reading; on a GPU it
// is a CUDA event recorded on the rank's device's current stream (LibTorch's), so an interval is
// the time the device spent between the two points, never the time the host took to queue the
// work. A host clock around asynchronous device work measures launches (doc/metrics.md, "Timing
// rule"); every interval of training, pipelining and probing comes from here instead.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"

namespace dtune::train {

class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;
  // Starts a new set of marks whose time zero is `origin`, a steady-clock reading at or before
  // now. On a GPU the offset between `origin` and now is added to every mark, so marks of ranks
  // that share one origin compare (the device is assumed idle at begin, as it is after a read).
  virtual void begin(Clock::time_point origin) = 0;
  void begin() { begin(Clock::now()); }
  // A point after all work queued so far on the timed stream; its index among this set's marks.
  virtual size_t mark() = 0;
  // Milliseconds from the origin to every mark since begin(), in order. On a GPU it waits for the
  // last mark (the one synchronisation); may be called again after further marks.
  virtual std::vector<double> read_ms() = 0;
  // "steady clock" or "CUDA events on GPU 0's current stream": what the figures came from.
  virtual std::string source() const = 0;
};

std::unique_ptr<DeviceTimeline> make_host_timeline();
// The current stream of GPU `device`; without CUDA in this build, throws UsageError.
std::unique_ptr<DeviceTimeline> make_cuda_timeline(int device);
// `device` < 0: the host's; else GPU `device`'s.
std::unique_ptr<DeviceTimeline> make_timeline(int device);

// Milliseconds between marks `from` and `to` of `ms` (read_ms()'s answer).
inline double between_ms(const std::vector<double>& ms, size_t from, size_t to) {
  return ms[to] - ms[from];
}

}  // namespace dtune::train
