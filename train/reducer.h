// Gradient reduction across ranks, the communication half of data parallelism. start() queues a
// flat buffer for an in-place sum over ranks and returns at once (the reduction overlaps whatever
// the caller does next); wait_all() blocks until every started buffer is reduced. Buffers are
// reduced in the order they were started, identically on every rank (the caller guarantees the
// order, as PyTorch DDP does), so collectives always match. Blocking collectives for the main
// thread (broadcast, max, checksums) go through the same object.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>

#include "core/context.h"
#include "core/deadline.h"
#include "train/config.h"
#include "train/telemetry/trace_log.h"

namespace dtune::train {

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual std::string name() const = 0;
  virtual void start(torch::Tensor flat) = 0;
  // As start(), a sum over ranks of `flat` (numel a multiple of the ranks), of which this rank
  // keeps only its part, into `shard` (numel / ranks elements: part r of rank r). ZeRO-2's
  // gradient reduction; queued in order with start()'s.
  virtual void start_reduce_scatter(torch::Tensor flat, torch::Tensor shard) = 0;
  // Throws TimeoutError when a reduction is not done by `deadline`.
  virtual void wait_all(const Deadline& deadline) = 0;
  // Blocking, on the caller's thread, with no reduction in flight.
  virtual void broadcast(torch::Tensor t, int root) = 0;
  virtual void allreduce_sum(torch::Tensor t) = 0;
  virtual void allreduce_max(torch::Tensor t) = 0;
  // In place: part r of `full` (numel a multiple of the ranks) is rank r's, and after the call
  // every rank holds every rank's part; blocking, no reduction in flight. ZeRO's parameter gather.
  virtual void allgather_in_place(torch::Tensor full) = 0;
  // The same gather, queued in order with start()'s and run beside the caller (MPI: on the
  // communication thread; NCCL: on the communication stream, after what the compute stream has
  // queued, such as the copy of this rank's part). Returns a ticket for wait_gathered. ZeRO-3's
  // unit gathers, issued ahead of their use (--shard-prefetch).
  virtual int64_t start_allgather(torch::Tensor full) = 0;
  // Until gather `ticket` is done: MPI blocks the caller (TimeoutError past `deadline`); NCCL makes
  // the compute stream wait for it (a gather that never ends is caught by the next wait_all).
  virtual void wait_gathered(int64_t ticket, const Deadline& deadline) = 0;
  // --profile-steps: gradient reductions are recorded here (only while the log is enabled).
  void set_trace(TraceLog* log) { trace_ = log; }

 protected:
  TraceLog* trace_ = nullptr;
};

// Host tensors reduced by a communication thread with MPI_Allreduce (fp32, fp64; fp16 and bf16
// through dtune's user-defined ops). Device tensors are staged through host memory. The thread
// calls MPI while the main thread does: throws Error unless MPI was initialised with
// MPI_THREAD_MULTIPLE (RunContext::mpi_thread_level). ReduceAlgo::kHierarchical sums the buckets
// within each node first (core/hierarchical_allreduce.h).
std::unique_ptr<Reducer> make_mpi_reducer(const RunContext& ctx, ReduceAlgo algo);
// The same over `comm`, ctx.comm() or a sub-communicator of it (a pipeline stage's data-parallel
// group; kHierarchical then reduces within the group's ranks on each node first).
std::unique_ptr<Reducer> make_mpi_reducer(const RunContext& ctx, MPI_Comm comm,
                                          ReduceAlgo algo = ReduceAlgo::kFlat);
// GPU tensors reduced by NCCL on a communication stream that waits for the gradients' stream.
// Each wait for completion gives up after `timeout_s` (--timeout) and aborts the communicator;
// creating it blocks under the caller's armed watchdog (core/cuda/nccl_comm.h). Defined in
// nccl_reducer.cc when built with NCCL; otherwise throws UsageError.
std::unique_ptr<Reducer> make_nccl_reducer(const RunContext& ctx, int device, double timeout_s);
// The same over `comm`, a sub-communicator of ctx.comm() (a pipeline stage's data-parallel group).
std::unique_ptr<Reducer> make_nccl_reducer(MPI_Comm comm, int device, double timeout_s);

}  // namespace dtune::train
