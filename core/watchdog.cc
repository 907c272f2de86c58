// Watchdog thread.
#include "core/watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>

#include "core/error.h"

namespace dtune {

Watchdog::Watchdog(std::string tool, bool abort_with_mpi)
    : tool_(std::move(tool)), abort_with_mpi_(abort_with_mpi), thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(double timeout_s, std::string what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = true;
    timeout_s_ = timeout_s;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(timeout_s));
    what_ = std::move(what);
  }
  cv_.notify_all();
}

void Watchdog::on_fire(std::function<std::string()> diagnose, std::function<void()> last_words) {
  std::lock_guard<std::mutex> lock(mutex_);
  diagnose_ = std::move(diagnose);
  last_words_ = std::move(last_words);
}

void Watchdog::set_abort_with_mpi(bool abort_with_mpi) {
  std::lock_guard<std::mutex> lock(mutex_);
  abort_with_mpi_ = abort_with_mpi;
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    const auto deadline = deadline_;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && armed_ && !stop_ &&
        deadline_ == deadline) {
      std::string who;
      try {
        if (diagnose_) who = diagnose_();
      } catch (const std::exception& e) {
        who = std::string("(could not tell which rank stopped: ") + e.what() + ")";
      }
      std::fprintf(
          stderr,
          "%s: error: %s did not finish within %g s on %s: a rank it needs is not taking "
          "part (hung, dead or much slower)%s%s; aborting the job. Raise --timeout if this "
          "is expected.\n",
          tool_.c_str(), what_.c_str(), timeout_s_, process_identity().c_str(),
          who.empty() ? "" : "; ", who.c_str());
      std::fflush(stderr);
      try {
        if (last_words_) last_words_();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: warning: could not save the measurements: %s\n", tool_.c_str(),
                     e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      if (abort_with_mpi_) MPI_Abort(MPI_COMM_WORLD, kTimeoutExitStatus);
      _exit(kTimeoutExitStatus);
    }
  }
}

}  // namespace dtune
