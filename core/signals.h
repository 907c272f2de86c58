// SIGINT/SIGTERM become a stop request that the benchmark loops poll between measured steps; the
// ranks agree on it through the arrival check, so every rank stops at the same point and what was
// measured is written. A second signal kills the process the default way.
#pragma once

namespace dtune {

void install_stop_handlers();
bool stop_requested();
int stop_signal();  // the signal received, 0 if none

}  // namespace dtune
