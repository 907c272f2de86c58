// Arrival checks: before each measured step every rank reports to rank 0, which waits at most a
// deadline and names the ranks that did not arrive (a hung or dead rank becomes an error message
// instead of a silent hang). The same exchange carries a stop request (SIGINT/SIGTERM seen on any
// rank), so all ranks stop at the same boundary and nothing measured is lost.
#pragma once

#include <string>

#include "core/context.h"

namespace dtune {

class ArrivalCheck {
 public:
  explicit ArrivalCheck(const RunContext& ctx);
  // Returns true when any rank asked to stop. Throws TimeoutError naming the missing ranks
  // (on rank 0) or rank 0 (on the others) after `timeout_s` seconds.
  bool arrive(const std::string& label, double timeout_s, bool stop_requested);

 private:
  MpiComm comm_;  // private duplicate: arrival messages never match the benchmark's own
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace dtune
