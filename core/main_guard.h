// The only place exceptions are caught: runs a binary's body with MPI up and turns exceptions
// into exit statuses. UsageError (thrown only where every rank agrees, e.g. option checks, or
// after rank 0 broadcast its verdict) prints once and exits 2 on every rank; any other error is
// printed by the failing rank, which then calls MPI_Abort so that no rank waits forever in a
// collective (TimeoutError: exit 3, other errors: exit 1).
#pragma once

#include <functional>

#include "core/context.h"
#include "core/watchdog.h"

namespace dtune {

inline constexpr int kUsageExitStatus = 2;

struct MainArgs {
  int argc;
  char** argv;
  const RunContext& ctx;
  // The process's one watchdog (core/watchdog.h), owned by run_main: every blocking wait of the
  // body runs armed on it (DeadlineGuard, or the training run's monitor), and whoever installs
  // on_fire callbacks removes them before the objects they capture are destroyed.
  Watchdog& watchdog;
};

// The binary's --timeout before its options are parsed (they are parsed once MPI is up), to bound
// MPI_Init and the set-up: the last `--timeout S` or `--timeout=S` on the command line, else
// DTUNE_<TOOL>_TIMEOUT (dtune-comm: DTUNE_COMM_TIMEOUT), else 300 s, every binary's default. A
// value the option parser will refuse later counts as absent here.
double setup_timeout_s(int argc, char** argv, const char* tool);

int run_main(int argc, char** argv, const char* tool,
             const std::function<int(const MainArgs&)>& body);

// Ends the process with `code` once run_main has returned (MPI finalized, the results files
// closed by their owners): stdio and the iostreams flushed, HDF5 closed (H5close: anything still
// open is flushed to disk), then std::_Exit, which skips the static destructors and atexit
// handlers. LibTorch's unregister every operator it registered at start-up: an empty main linked
// as dtune-train is spends 0.40 s of CPU with them and 0.27 s without, paid by every rank of
// every run (the test suite makes about a thousand short ones). Each binary's main:
// `dtune::end_process(dtune::run_main(...))`.
[[noreturn]] void end_process(int code);

}  // namespace dtune
