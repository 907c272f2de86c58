// Exception-to-exit-status translation and job abort.
#include "core/main_guard.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/watchdog.h"

namespace dtune {

namespace {
// LibTorch's errors append a C++ backtrace ("Exception raised from ..."): keep the message.
std::string first_part(const char* what) {
  std::string s = what;
  const size_t cut = s.find("\nException raised from");
  if (cut != std::string::npos) s.resize(cut);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

int run_main(int argc, char** argv, const char* tool,
             const std::function<int(const MainArgs&)>& body) {
  MpiSession session(&argc, &argv);
  int code = 0;
  bool abort = false;
  {
    // The context (and its communicators) must be gone before MPI_Finalize.
    std::unique_ptr<RunContext> ctx;
    try {
      ctx = std::make_unique<RunContext>(RunContext::create());
      code = body(MainArgs{argc, argv, *ctx, session.thread_level()});
    } catch (const UsageError& e) {
      if (!ctx || ctx->is_root()) std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
      code = kUsageExitStatus;
    } catch (const TimeoutError& e) {
      std::fprintf(stderr, "%s: error: %s [%s]\n", tool, e.what(), process_identity().c_str());
      code = kTimeoutExitStatus;
      abort = true;
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
