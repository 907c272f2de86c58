// A hang is an error: the watchdog thread aborts the whole job when an armed wait (a blocking MPI
// collective, which cannot be interrupted from inside) runs past its deadline, after printing what
// was being waited for on which rank. Cost while armed and idle: one condition-variable wait.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dtune {

class Watchdog {
 public:
  // `tool` prefixes the message; `abort_with_mpi` is true when MPI was initialised with
  // MPI_THREAD_MULTIPLE (MPI_Abort from this thread is then allowed); otherwise the process
  // exits with _exit and the launcher takes the job down.
  Watchdog(std::string tool, bool abort_with_mpi);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();

  // MPI is up (MPI_Init_thread returned): abort through MPI_Abort when `abort_with_mpi`. Before,
  // the watchdog can only _exit (it bounds MPI_Init_thread itself).
  void set_abort_with_mpi(bool abort_with_mpi);

  // Abort the job unless disarm() comes within `timeout_s` seconds.
  void arm(double timeout_s, std::string what);
  void disarm();

  // Called on the watchdog thread when it fires, before the job is aborted: `diagnose` returns
  // text for the message (who stopped: core/rank_board.h), `last_words` saves what was measured.
  // Neither may call MPI; exceptions are caught. The main thread is then blocked (inside the wait,
  // or in disarm()), so they may touch what it owns between waits.
  void on_fire(std::function<std::string()> diagnose, std::function<void()> last_words);

 private:
  void loop();

  std::string tool_;
  bool abort_with_mpi_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stop_ = false;
  std::chrono::steady_clock::time_point deadline_;
  double timeout_s_ = 0;
  std::string what_;
  std::function<std::string()> diagnose_;
  std::function<void()> last_words_;
  std::thread thread_;
};

inline constexpr int kTimeoutExitStatus = 3;

}  // namespace dtune
