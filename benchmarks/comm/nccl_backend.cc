// The NCCL backend: one GPU per rank, device buffers, and each collective called exactly as
// nccl-tests calls it (same counts, same in-place offsets, alltoall and sendrecv as grouped
// ncclSend/ncclRecv), so our table is comparable to theirs. Timing uses CUDA events on the
// backend's own stream; every wait is bounded by the run's deadline (NcclComm::wait).
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/comm/backend.h"
#include "benchmarks/comm/collectives.h"
#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"
#include "core/cuda/nccl_comm.h"
#include "core/device_info.h"
#include "core/error.h"

namespace dtune::comm {
namespace {

// Host<->device copies of check data: seconds at worst, so a minute means something is broken.
constexpr auto kCopyTimeout = std::chrono::seconds(60);

ncclDataType_t nccl_dtype(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
      return ncclFloat32;
    case Dtype::kFloat64:
      return ncclFloat64;
    case Dtype::kInt32:
      return ncclInt32;
    case Dtype::kBfloat16:
      return ncclBfloat16;
    case Dtype::kFloat16:
      return ncclFloat16;
  }
  throw Error("nccl backend: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  throw Error("nccl backend: unknown reduction op");
}

// Picks local_rank % device_count. Collective: every rank shares its device count first, so a
// rank without a GPU fails with its own clear message and the others name it, instead of waiting
// in NCCL initialisation for a peer that will never join.
int select_device(const RunContext& ctx) {
  int count = 0;
  std::string reason;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    reason = std::string(" (cudaGetDeviceCount: ") + cudaGetErrorString(rc) + ")";
    cudaGetLastError();
    count = 0;
  }
  std::vector<int> counts(static_cast<size_t>(ctx.world_size()), 0);
  DTUNE_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, ctx.comm()));
  if (count == 0) {
    throw UsageError("no CUDA device visible to rank " + std::to_string(ctx.rank()) + " on host " +
                     ctx.host() + reason + ": the nccl backend needs one GPU per rank");
  }
  std::ostringstream missing;
  int n_missing = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > 0) continue;
    missing << (n_missing++ ? ", " : "") << r;
  }
  if (n_missing > 0) {
    throw UsageError("no CUDA device visible to rank(s) " + missing.str() +
                     ": the nccl backend needs one GPU per rank");
  }
  return ctx.local_rank() % count;
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(const RunContext& ctx, int device)
      : device_(device), rank_(ctx.rank()), nranks_(ctx.world_size()) {
    DTUNE_CUDA_CHECK(cudaSetDevice(device_));
    stream_ = CudaStream::create();
    comm_ = NcclComm::create(ctx);  // under the driver's set-up DeadlineGuard
  }

  std::string name() const override { return to_string(BackendKind::kNccl); }
  std::string version() const override { return "NCCL " + nccl_version_string(); }
  std::string device() const override { return describe_device(device_); }

  void allocate(size_t send_bytes, size_t recv_bytes) override {
    use_device();
    // Free first: the old and new buffers together might not fit.
    send_ = DeviceBuffer();
    recv_ = DeviceBuffer();
    send_ = DeviceBuffer::allocate(send_bytes);
    recv_ = DeviceBuffer::allocate(recv_bytes);
  }

  bool supports(const OpShape& s, Placement p) const override {
    return p == Placement::kOutOfPlace || collective_spec(s.collective).nccl_in_place;
  }

  void upload(const void* send_host, size_t send_bytes, const void* recv_host,
              size_t recv_bytes) override {
    DTUNE_CHECK(send_bytes <= send_.size() && recv_bytes <= recv_.size(),
                "nccl backend: upload larger than the allocated buffers");
    use_device();
    // On our stream, then waited for: a plain cudaMemcpy runs on the legacy stream, which our
    // non-blocking stream does not order against.
    if (send_bytes > 0) {
      DTUNE_CUDA_CHECK(cudaMemcpyAsync(send_.data(), send_host, send_bytes, cudaMemcpyHostToDevice,
                                       stream_.get()));
    }
    if (recv_bytes > 0) {
      DTUNE_CUDA_CHECK(cudaMemcpyAsync(recv_.data(), recv_host, recv_bytes, cudaMemcpyHostToDevice,
                                       stream_.get()));
    }
    comm_.wait(stream_.get(), Clock::now() + kCopyTimeout, "the upload of check data");
  }

  void download_recv(void* recv_host, size_t recv_bytes) override {
    DTUNE_CHECK(recv_bytes <= recv_.size(),
                "nccl backend: download larger than the receive buffer");
    if (recv_bytes == 0) return;
    use_device();
    DTUNE_CUDA_CHECK(cudaMemcpyAsync(recv_host, recv_.data(), recv_bytes, cudaMemcpyDeviceToHost,
                                     stream_.get()));
    comm_.wait(stream_.get(), Clock::now() + kCopyTimeout, "the download of results");
  }

  size_t result_offset(const OpShape& s, Placement p) const override {
    return p == Placement::kInPlace ? static_cast<size_t>(rank_) * s.recv_in_place_offset : 0;
  }

  void run(const OpShape& s, Placement p, int iters, Blocking blocking, Clock::time_point deadline,
           std::vector<double>& times_us) override {
    DTUNE_CHECK(iters >= 0, "nccl backend: negative iteration count");
    DTUNE_CHECK(supports(s, p), "nccl backend: " + to_string(s.collective) + " has no " +
                                    to_string(p) + " form in NCCL");
    check_fits(s, p);
    use_device();
    times_us.assign(static_cast<size_t>(iters), 0.0);
    if (iters == 0) return;
    while (events_.size() < static_cast<size_t>(iters) + 1) events_.push_back(CudaEvent::create());

    const cudaStream_t stream = stream_.get();
    const std::string what = std::to_string(iters) + " x " + to_string(s.collective) + " (" +
                             std::to_string(s.bytes) + " B, " + to_string(p) + ")";
    // Event i marks the start of iteration i and the end of iteration i - 1, so back-to-back
    // iterations are timed without gaps. With -z the host's wait for iteration i is counted in
    // interval i (event i + 1 is recorded after it), as nccl-tests' blocking mode counts it.
    for (int i = 0; i < iters; ++i) {
      events_[static_cast<size_t>(i)].record(stream);
      launch(s, p, deadline);
      if (blocking == Blocking::kYes) comm_.wait(stream, deadline, what);
    }
    events_[static_cast<size_t>(iters)].record(stream);
    comm_.wait(stream, deadline, what);
    for (size_t i = 0; i < static_cast<size_t>(iters); ++i)
      times_us[i] = CudaEvent::elapsed_ms(events_[i], events_[i + 1]) * 1000.0;
  }

 private:
  void use_device() const { DTUNE_CUDA_CHECK(cudaSetDevice(device_)); }

  // Bytes NCCL will touch in each buffer, from the shape's counts and in-place offsets.
  void check_fits(const OpShape& s, Placement p) const {
    DTUNE_CHECK(s.nranks == nranks_, "nccl backend: shape made for " + std::to_string(s.nranks) +
                                         " ranks, communicator has " + std::to_string(nranks_));
    DTUNE_CHECK(!is_rooted(s.collective) || (s.root >= 0 && s.root < nranks_),
                "nccl backend: root " + std::to_string(s.root) + " is not a rank");
    const size_t es = dtype_size(s.dtype), me = static_cast<size_t>(rank_);
    size_t send = s.send_count * es, recv = s.recv_count * es;
    if (p == Placement::kInPlace) {
      recv = std::max(me * s.send_in_place_offset * es + send,
                      me * s.recv_in_place_offset * es + recv);
      send = 0;
    }
    DTUNE_CHECK(send <= send_.size() && recv <= recv_.size(),
                "nccl backend: " + to_string(s.collective) + " of count " +
                    std::to_string(s.count) + " needs " + std::to_string(send) + " + " +
                    std::to_string(recv) + " B but allocate() gave " +
                    std::to_string(send_.size()) + " + " + std::to_string(recv_.size()) + " B");
  }

  // One operation, enqueued on stream_. In-place, the receive buffer is the only buffer, the
  // input and result at rank × the shape's in-place offsets, as nccl-tests' src/common.cu
  // startColl passes them (allgather's input is this rank's slice of the output, reduce_scatter's
  // result this rank's slice of the input).
  void launch(const OpShape& s, Placement p, Clock::time_point deadline) {
    const size_t count = s.count;
    const size_t es = dtype_size(s.dtype), chunk = count * es, me = static_cast<size_t>(rank_);
    const ncclDataType_t type = nccl_dtype(s.dtype);
    char* recv = static_cast<char*>(recv_.data());
    char* send = static_cast<char*>(send_.data());
    if (p == Placement::kInPlace) {
      send = recv + me * s.send_in_place_offset * es;
      recv += me * s.recv_in_place_offset * es;
    }
    const ncclComm_t comm = comm_.get();
    const cudaStream_t stream = stream_.get();

    switch (s.collective) {
      case Collective::kAllreduce:
        DTUNE_NCCL_SETTLE(
            comm_, ncclAllReduce(send, recv, count, type, nccl_op(s.op), comm, stream), deadline);
        break;
      case Collective::kAllgather:
        DTUNE_NCCL_SETTLE(comm_, ncclAllGather(send, recv, count, type, comm, stream), deadline);
        break;
      case Collective::kReduceScatter:
        DTUNE_NCCL_SETTLE(comm_,
                          ncclReduceScatter(send, recv, count, type, nccl_op(s.op), comm, stream),
                          deadline);
        break;
      case Collective::kBroadcast:
        DTUNE_NCCL_SETTLE(comm_, ncclBroadcast(send, recv, count, type, s.root, comm, stream),
                          deadline);
        break;
      case Collective::kReduce:
        DTUNE_NCCL_SETTLE(comm_,
                          ncclReduce(send, recv, count, type, nccl_op(s.op), s.root, comm, stream),
                          deadline);
        break;
      case Collective::kAlltoall:
        // nccl-tests' alltoall.cu: `count` elements to and from every peer, peer r's block at
        // r * count; calls inside a group only queue, ncclGroupEnd launches (and may be pending).
        DTUNE_NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < nranks_; ++r) {
          const size_t off = static_cast<size_t>(r) * chunk;
          DTUNE_NCCL_SETTLE(comm_, ncclSend(send + off, count, type, r, comm, stream), deadline);
          DTUNE_NCCL_SETTLE(comm_, ncclRecv(recv + off, count, type, r, comm, stream), deadline);
        }
        DTUNE_NCCL_SETTLE(comm_, ncclGroupEnd(), deadline);
        break;
      case Collective::kSendrecv: {
        // nccl-tests' sendrecv.cu: a ring shift, send to the next rank, receive from the previous.
        const int to = (rank_ + 1) % nranks_;
        const int from = (rank_ - 1 + nranks_) % nranks_;
        DTUNE_NCCL_CHECK(ncclGroupStart());
        DTUNE_NCCL_SETTLE(comm_, ncclSend(send, count, type, to, comm, stream), deadline);
        DTUNE_NCCL_SETTLE(comm_, ncclRecv(recv, count, type, from, comm, stream), deadline);
        DTUNE_NCCL_SETTLE(comm_, ncclGroupEnd(), deadline);
        break;
      }
    }
  }

  int device_;
  int rank_;
  int nranks_;
  // Declared so that destruction runs in reverse: the communicator is finalized while the
  // stream and buffers it used still exist.
  CudaStream stream_;
  std::vector<CudaEvent> events_;  // iters + 1 timing events, reused across run() calls
  DeviceBuffer send_;
  DeviceBuffer recv_;
  NcclComm comm_;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const RunContext& ctx) {
  const int device = select_device(ctx);
  return std::make_unique<NcclBackend>(ctx, device);
}

bool nccl_backend_built() { return true; }

}  // namespace dtune::comm
