// Async-signal-safe stop flag.
#include "core/signals.h"

#include <csignal>

namespace dtune {
namespace {
volatile std::sig_atomic_t g_signal = 0;  // written only by the handler

void on_signal(int sig) {
  g_signal = sig;
  std::signal(sig, SIG_DFL);  // a second signal terminates at once
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }

}  // namespace dtune
