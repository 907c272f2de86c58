// DeadlineGuard: arm on construction, disarm on destruction.
#include "core/deadline.h"

#include "core/watchdog.h"

namespace dtune {

DeadlineGuard::DeadlineGuard(Watchdog& watchdog, double timeout_s, std::string what)
    : watchdog_(watchdog) {
  watchdog_.arm(timeout_s, std::move(what));
}

DeadlineGuard::~DeadlineGuard() { watchdog_.disarm(); }

}  // namespace dtune
