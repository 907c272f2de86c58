// The communication backend interface shared by the MPI and NCCL implementations, so that every
// metric is computed by the same driver and MPI against NCCL is one flag. A backend owns the send
// and receive buffers (host memory for MPI, device memory for NCCL) and runs one operation shape.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/comm/types.h"
#include "core/context.h"
#include "core/deadline.h"

namespace dtune::comm {

enum class Blocking { kNo, kYes };  // -z: synchronise after every iteration

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Library version string for provenance ("NCCL 2.28.9", the MPI library line).
  virtual std::string version() const = 0;
  // The device this rank uses ("cpu" for host buffers; "cuda:0 NVIDIA H200 (0000:1b:00.0)").
  virtual std::string device() const = 0;

  // Allocate buffers large enough for the largest shape of the run (bytes per rank).
  virtual void allocate(size_t send_bytes, size_t recv_bytes) = 0;
  // Whether this backend has the operation in this placement (NCCL has no in-place alltoall or
  // sendrecv, the rows' nccl_in_place: the table prints N/A for them).
  virtual bool supports(const OpShape& s, Placement p) const = 0;
  // Copy check data into the buffers: `send_bytes` into the send buffer and `recv_bytes` into the
  // receive buffer. In-place operations use the receive buffer as their only buffer, laid out as
  // NCCL does (nccl-tests' sendInplaceOffset/recvInplaceOffset), so the driver uploads the input
  // image into the receive buffer for them.
  virtual void upload(const void* send_host, size_t send_bytes, const void* recv_host,
                      size_t recv_bytes) = 0;
  // Copy the first `recv_bytes` bytes of the receive buffer back (after an operation completed).
  virtual void download_recv(void* recv_host, size_t recv_bytes) = 0;
  // Where the result starts in the receive buffer, in elements: 0, except in-place, where NCCL
  // leaves it at rank × the shape's recv_in_place_offset (reduce_scatter: rank × count) and MPI
  // at 0 (MPI_Reduce_scatter_block with MPI_IN_PLACE).
  virtual size_t result_offset(const OpShape& s, Placement p) const = 0;

  // Run `iters` operations back to back and store each one's time in `times_us` (resized to
  // iters). With Blocking::kYes the backend waits for completion after every operation. Any
  // wait longer than `deadline` throws TimeoutError (after aborting a device communicator).
  virtual void run(const OpShape& s, Placement p, int iters, Blocking blocking,
                   Clock::time_point deadline, std::vector<double>& times_us) = 0;
};

// Host buffers, or device buffers for a CUDA-aware MPI (UsageError when that is not available).
// `algorithm` says how allreduce runs (core/hierarchical_allreduce.h for kHierarchical);
// `progress` how every operation is waited for (progress_thread.h for kThread).
std::unique_ptr<Backend> make_mpi_backend(const RunContext& ctx, MpiBuffers where,
                                          Algorithm algorithm, MpiProgress progress);
// Defined in nccl_backend.cc when dtune is built with CUDA and NCCL; otherwise in
// nccl_backend_unavailable.cc, which throws a UsageError saying how to build with NCCL.
std::unique_ptr<Backend> make_nccl_backend(const RunContext& ctx);
bool nccl_backend_built();

}  // namespace dtune::comm
