// dtune-comm --mpi-progress thread: a communication thread that runs each operation for the
// calling thread, as dtune-train's gradient reducer does (train/mpi_reducer.cc): the caller hands
// the operation over through a condition variable, the thread starts the nonblocking collective
// and polls it to completion (core/mpi_poll.h), and the caller, asleep meanwhile, is woken when it
// is done. A timed iteration therefore pays both hand-overs and the polled progress, as a
// training step's reduction does; the library's blocking call (--mpi-progress call) pays neither.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace dtune::comm {

class ProgressThread {
 public:
  ProgressThread();
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Runs `op` on the communication thread and returns when it has finished; rethrows what it
  // threw. One operation at a time (the caller waits).
  void run(const std::function<void()>& op);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void()>* job_ = nullptr;  // set by run(), cleared by the thread when done
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace dtune::comm
