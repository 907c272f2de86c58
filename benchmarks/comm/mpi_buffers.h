// Where the MPI backend's send and receive buffers live: host memory, or device memory handed
// straight to a CUDA-aware MPI (which moves it over NVLink/GPUDirect itself). The device variant
// is defined in mpi_device_buffers.cc when dtune is built with CUDA, otherwise in
// mpi_device_buffers_unavailable.cc, which says how to get it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "benchmarks/comm/types.h"
#include "core/context.h"

namespace dtune::comm {

class BufferPair {
 public:
  virtual ~BufferPair() = default;
  virtual void allocate(size_t send_bytes, size_t recv_bytes) = 0;
  virtual void* send() = 0;
  virtual void* recv() = 0;
  virtual void upload(const void* send_host, size_t send_bytes, const void* recv_host,
                      size_t recv_bytes) = 0;
  virtual void download_recv(void* recv_host, size_t recv_bytes) = 0;
  virtual bool on_device() const = 0;
  virtual std::string device() const = 0;  // "cpu" or describe_device()
};

std::unique_ptr<BufferPair> make_host_buffers();
// Throws UsageError when the MPI library is not CUDA-aware or this rank sees no GPU.
std::unique_ptr<BufferPair> make_device_buffers(const RunContext& ctx);

}  // namespace dtune::comm
