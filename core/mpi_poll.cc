// The communication threads' wait (mpi_poll.h).
#include "core/mpi_poll.h"

#include <thread>

namespace dtune {

bool poll_to_completion(const std::function<bool()>& test, const std::atomic<bool>* abandon) {
  for (int spins = 0;; ++spins) {
    if (test()) return true;
    if (abandon && abandon->load(std::memory_order_relaxed)) return false;
    if (spins > kPollSpins) std::this_thread::yield();
  }
}

}  // namespace dtune
