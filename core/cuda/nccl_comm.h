// RAII for an NCCL communicator bootstrapped over MPI. The communicator is blocking
// (ncclConfig_t::blocking = 1, nccl_comm_config()), as nccl-tests' is: a nonblocking one makes
// every ncclGroupEnd start a host thread and return ncclInProgress to be polled (NCCL 2.28,
// src/group.cc), so the host can no longer run ahead of the GPU and every small operation pays a
// thread start. Completion is still polled against a deadline (wait(): cudaStreamQuery and
// ncclCommGetAsyncError, as nccl-tests' testStreamSynchronize), and a peer that never arrives
// becomes a TimeoutError after ncclCommAbort. The calls that block on the host (initialisation,
// the first operation's connection set-up) are bounded by the caller's armed watchdog
// (core/watchdog.h), which every caller holds around them. Compiled only when NCCL is found.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <string>

#include "core/context.h"
#include "core/deadline.h"

namespace dtune {

class NcclComm {
 public:
  NcclComm() = default;
  // Collective over ctx.comm(), on the current CUDA device (call cudaSetDevice first): rank 0
  // makes the unique id, MPI_Bcast shares it, every rank joins with ncclCommInitRankConfig, which
  // returns when the communicator is ready. Call it under an armed watchdog: a peer that never
  // joins blocks it.
  static NcclComm create(const RunContext& ctx);
  // The same over `comm` (a sub-communicator: a pipeline stage's data-parallel group, or the two
  // ranks of a pipeline edge); NCCL ranks are `comm`'s ranks.
  static NcclComm create(MPI_Comm comm);
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;
  // ncclCommFinalize + ncclCommDestroy (every operation was waited for by then, so a blocking
  // finalize only flushes); ncclCommAbort instead after an error, a timeout, or while an exception
  // unwinds (peers may never finalize with us).
  ~NcclComm();

  ncclComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Aborts outstanding operations and frees the communicator; empty afterwards. Never throws.
  void abort() noexcept;

  // Completes a call on this communicator (through DTUNE_NCCL_SETTLE): ncclSuccess returns; any
  // error aborts the communicator and throws. ncclInProgress, which only a communicator made
  // nonblocking by the environment (NCCL_COMM_BLOCKING=0 overrides the config) returns, is polled
  // with ncclCommGetAsyncError until it settles or `deadline` passes.
  void settle(ncclResult_t rc, const char* expr, const char* file, int line,
              Clock::time_point deadline);

  // Polls cudaStreamQuery and ncclCommGetAsyncError until all work queued on `stream` is done.
  // An asynchronous NCCL error or a CUDA error aborts the communicator and throws Error; passing
  // `deadline` aborts and throws TimeoutError naming this rank and `what` it waited for.
  void wait(cudaStream_t stream, Clock::time_point deadline,
            const std::string& what = "NCCL operations");

 private:
  [[noreturn]] void fail(ncclResult_t rc, const char* expr, const char* file, int line);
  [[noreturn]] void time_out(const std::string& what, Clock::time_point since);
  void destroy() noexcept;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
};

// The configuration every dtune communicator is made with: NCCL's defaults, blocking.
ncclConfig_t nccl_comm_config();

// "2.28.9": the version of the NCCL library loaded at run time (ncclGetVersion), which may differ
// from the header dtune was compiled against.
std::string nccl_version_string();

}  // namespace dtune

// Issues an NCCL call on an NcclComm; an error aborts the communicator and throws
// (NcclComm::settle).
#define DTUNE_NCCL_SETTLE(nccl_comm, expr, deadline) \
  (nccl_comm).settle((expr), #expr, __FILE__, __LINE__, (deadline))
