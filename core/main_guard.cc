// Exception-to-exit-status translation and job abort.
#include "core/main_guard.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/watchdog.h"

namespace dtune {

namespace {
// LibTorch's errors append a C++ backtrace ("Exception raised from ...", or after an enforce
// failure "frame #0: ..."): keep the message.
std::string first_part(const char* what) {
  std::string s = what;
  const size_t cut = std::min(s.find("\nException raised from"), s.find("\nframe #"));
  if (cut != std::string::npos) s.resize(cut);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// True when every rank reaches this call within `timeout`. A usage error that every rank found (a
// bad flag, a path every rank checks) then ends quietly with exit 2, printed once; one that only
// some ranks hit (a bad record in rank 0's slice of the data) must abort the job instead, or the
// other ranks would wait for them in their next collective until --timeout, or forever.
bool every_rank_arrives(MPI_Comm comm, std::chrono::milliseconds timeout) {
  MPI_Request req;
  if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    if (std::chrono::steady_clock::now() > deadline) return false;  // we abort: req goes with us
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done != 0;
}

constexpr std::chrono::milliseconds kUsageAgreementTimeout{3000};

}  // namespace

int run_main(int argc, char** argv, const char* tool,
             const std::function<int(const MainArgs&)>& body) {
  MpiSession session(&argc, &argv);
  int code = 0;
  bool abort = false;
  {
    // The context (and its communicators) must be gone before MPI_Finalize.
    std::unique_ptr<RunContext> ctx;
    // After the context: it goes first. A hang ends through MPI_Abort from its thread when MPI
    // allows calls from any thread (MPI_THREAD_MULTIPLE), else through _exit and the launcher.
    std::unique_ptr<Watchdog> watchdog;
    try {
      ctx = std::make_unique<RunContext>(RunContext::create(session.thread_level()));
      watchdog = std::make_unique<Watchdog>(tool, ctx->mpi_thread_level() == MPI_THREAD_MULTIPLE);
      code = body(MainArgs{argc, argv, *ctx, *watchdog});
      // Every rank meets here before finishing. A rank that returned a failure waits only a
      // moment: when some ranks never come (they wait for it in a collective), it aborts the job
      // rather than leave them there. A rank that succeeded waits as MPI_Finalize would.
      if (ctx->world_size() > 1) {
        if (code == 0) {
          DTUNE_MPI_CHECK(MPI_Barrier(ctx->ending_comm()));
        } else if (!every_rank_arrives(ctx->ending_comm(), kUsageAgreementTimeout)) {
          std::fprintf(stderr, "%s: error: exit status %d on %s; the other ranks are stopped\n",
                       tool, code, process_identity().c_str());
          abort = true;
        }
      }
    } catch (const UsageError& e) {
      code = kUsageExitStatus;
      if (!ctx || ctx->world_size() == 1 ||
          every_rank_arrives(ctx->ending_comm(), kUsageAgreementTimeout)) {
        if (!ctx || ctx->is_root()) std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
      } else {
        std::fprintf(stderr, "%s: error: %s [%s; the other ranks are stopped]\n", tool, e.what(),
                     process_identity().c_str());
        abort = true;
      }
    } catch (const TimeoutError& e) {
      std::fprintf(stderr, "%s: error: %s [%s]\n", tool, e.what(), process_identity().c_str());
      code = kTimeoutExitStatus;
      abort = true;
      // Rank 0 saves what was measured before it aborts; the others give it a moment first.
      if (ctx && !ctx->is_root()) std::this_thread::sleep_for(std::chrono::seconds(2));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: error: %s\n", tool, first_part(e.what()).c_str());
      code = 1;
      abort = true;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    if (abort) MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}

}  // namespace dtune
