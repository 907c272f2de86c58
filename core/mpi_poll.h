// How dtune's communication threads wait for a nonblocking MPI operation: test it, spinning while
// it is likely close, then yielding the core between tests, so that on an oversubscribed CPU node
// the compute threads keep their cores. dtune-train's gradient reducer (train/mpi_reducer.cc) and
// dtune-comm --mpi-progress thread (benchmarks/comm/progress_thread.h) both wait this way, so the
// link dtune-comm measures is the one the trainer's reductions see.
#pragma once

#include <atomic>
#include <functional>

namespace dtune {

// Calls `test` until it returns true (the operation completed; MPI_Test's flag). Spins for the
// first kPollSpins tests, then yields the thread before each further test (Open MPI progresses a
// nonblocking collective only inside MPI calls, so the polling is what moves it). Returns false,
// leaving the operation in flight, as soon as `abandon` (when given) reads true.
bool poll_to_completion(const std::function<bool()>& test,
                        const std::atomic<bool>* abandon = nullptr);

inline constexpr int kPollSpins = 1000;

}  // namespace dtune
