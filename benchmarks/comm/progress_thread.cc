// The communication thread of dtune-comm --mpi-progress thread (progress_thread.h).
#include "benchmarks/comm/progress_thread.h"

namespace dtune::comm {

ProgressThread::ProgressThread() : thread_([this] { loop(); }) {}

ProgressThread::~ProgressThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void ProgressThread::run(const std::function<void()>& op) {
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &op;
  error_ = nullptr;
  lock.unlock();
  work_cv_.notify_one();
  lock.lock();
  done_cv_.wait(lock, [&] { return job_ == nullptr; });
  if (error_) std::rethrow_exception(error_);
}

void ProgressThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
    if (job_ == nullptr) return;  // stopping, nothing handed over
    const std::function<void()>* op = job_;
    lock.unlock();
    std::exception_ptr err;
    try {
      (*op)();
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    error_ = err;
    job_ = nullptr;
    done_cv_.notify_one();
  }
}

}  // namespace dtune::comm
