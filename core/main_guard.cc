// Exception-to-exit-status translation and job abort.
#include "core/main_guard.h"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "core/deadline.h"
#include "core/error.h"
#include "core/torch_cuda.h"
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

double setup_timeout_s(int argc, char** argv, const char* tool) {
  constexpr double kDefaultS = 300, kMaxS = 1e6;
  auto parse = [](const char* text, double fallback) {
    char* end = nullptr;
    const double v = text ? std::strtod(text, &end) : 0;
    return text && end != text && *end == '\0' && v > 0 && v <= kMaxS ? v : fallback;
  };
  std::string env = tool;
  env = env.substr(env.find('-') == std::string::npos ? 0 : env.find('-') + 1);
  for (char& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
  double t = parse(std::getenv(("DTUNE_" + env + "_TIMEOUT").c_str()), kDefaultS);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--timeout" && i + 1 < argc) t = parse(argv[i + 1], t);
    if (a.rfind("--timeout=", 0) == 0) t = parse(argv[i] + 10, t);
  }
  return t;
}

int run_main(int argc, char** argv, const char* tool,
             const std::function<int(const MainArgs&)>& body) {
  load_torch_cuda_if_driver();  // before anything asks LibTorch about CUDA (core/torch_cuda.h)
  // Starting MPI and finding every rank's node are collectives like any other: a rank that never
  // comes (a launcher that cannot reach a node, an MPI library whose ranks disagree about a split)
  // must end the job with a message, not leave it waiting silently before --timeout is even read.
  // So the watchdog exists first and bounds them by the --timeout found on the command line (or
  // in DTUNE_<TOOL>_TIMEOUT); until MPI is up it can only _exit, which the launcher sees.
  const double setup_s = setup_timeout_s(argc, argv, tool);
  Watchdog watchdog(tool, false);
  watchdog.arm(setup_s, "starting MPI (MPI_Init_thread: the launcher connecting the ranks)");
  MpiSession session(&argc, &argv);
  watchdog.disarm();
  watchdog.set_abort_with_mpi(session.thread_level() == MPI_THREAD_MULTIPLE);
  int code = 0;
  bool abort = false;
  {
    // The context (and its communicators) must be gone before MPI_Finalize.
    std::unique_ptr<RunContext> ctx;
    try {
      {
        const DeadlineGuard guard(watchdog, setup_s,
                                  "finding every rank's node (gathering host names, splitting "
                                  "communicators)");
        ctx = std::make_unique<RunContext>(RunContext::create(session.thread_level()));
      }
      code = body(MainArgs{argc, argv, *ctx, watchdog});
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
    } catch (const EndedElsewhere& e) {
      code = e.code();
      abort = true;
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

void end_process(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  H5close();
  std::_Exit(code);
}

}  // namespace dtune
