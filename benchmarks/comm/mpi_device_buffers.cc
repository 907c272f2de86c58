// Device buffers for a CUDA-aware MPI: one GPU per rank (local rank modulo the visible devices),
// filled and read back with cudaMemcpy outside the timed region. A cudaMemcpy from pageable host
// memory to the device may return once the data is staged, before the DMA into the buffer is done
// (CUDA runtime API, "API synchronization behavior"), and the MPI library reads the buffer on
// streams of its own: the upload ends with the device synchronised.
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_Query_cuda_support
#endif

#include "benchmarks/comm/mpi_buffers.h"
#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"
#include "core/device_info.h"
#include "core/error.h"

namespace dtune::comm {
namespace {

// Whether the MPI library accepts device pointers. Open MPI answers at run time; other MPIs are
// trusted when the user says DTUNE_MPI_CUDA_AWARE=1 (MPICH, MVAPICH and Cray MPICH have no query).
bool mpi_is_cuda_aware(std::string& how) {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  how = "MPIX_Query_cuda_support() = " + std::to_string(MPIX_Query_cuda_support());
  if (MPIX_Query_cuda_support() == 1) return true;
#else
  how = "this MPI has no MPIX_Query_cuda_support";
#endif
  const char* forced = std::getenv("DTUNE_MPI_CUDA_AWARE");
  return forced != nullptr && std::string(forced) == "1";
}

class DeviceBuffers final : public BufferPair {
 public:
  explicit DeviceBuffers(int device) : device_(device) {}
  void allocate(size_t send_bytes, size_t recv_bytes) override {
    DTUNE_CUDA_CHECK(cudaSetDevice(device_));
    send_ = DeviceBuffer::allocate(send_bytes);
    recv_ = DeviceBuffer::allocate(recv_bytes);
  }
  void* send() override { return send_.data(); }
  void* recv() override { return recv_.data(); }
  void upload(const void* send_host, size_t send_bytes, const void* recv_host,
              size_t recv_bytes) override {
    DTUNE_CHECK(send_bytes <= send_.size() && recv_bytes <= recv_.size(),
                "upload larger than buffers");
    if (send_bytes)
      DTUNE_CUDA_CHECK(cudaMemcpy(send_.data(), send_host, send_bytes, cudaMemcpyHostToDevice));
    if (recv_bytes)
      DTUNE_CUDA_CHECK(cudaMemcpy(recv_.data(), recv_host, recv_bytes, cudaMemcpyHostToDevice));
    DTUNE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void download_recv(void* recv_host, size_t recv_bytes) override {
    DTUNE_CHECK(recv_bytes <= recv_.size(), "download larger than buffer");
    DTUNE_CUDA_CHECK(cudaMemcpy(recv_host, recv_.data(), recv_bytes, cudaMemcpyDeviceToHost));
  }
  bool on_device() const override { return true; }
  std::string device() const override { return describe_device(device_); }

 private:
  int device_;
  DeviceBuffer send_, recv_;
};

}  // namespace

std::unique_ptr<BufferPair> make_device_buffers(const RunContext& ctx) {
  std::string how;
  if (!mpi_is_cuda_aware(how))
    throw UsageError("--mpi-buffers device: this MPI library is not CUDA-aware (" + how +
                     "); use an MPI built with CUDA (Open MPI with UCX and CUDA), set "
                     "DTUNE_MPI_CUDA_AWARE=1 if yours is but cannot say so, or use --backend nccl");
  const int count = query_device_summary().device_count;
  if (count == 0)
    throw UsageError("--mpi-buffers device: no CUDA device visible to " + process_identity() +
                     "; run on GPU nodes or use --mpi-buffers host");
  return std::make_unique<DeviceBuffers>(ctx.local_rank() % count);
}

}  // namespace dtune::comm
