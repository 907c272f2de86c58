// The MPI backend: host buffers, or device buffers for a CUDA-aware MPI (mpi_buffers.h); MPI
// collectives timed one by one with the steady clock (allreduce flat, or hierarchical with
// --algorithm hierarchical): the library's blocking calls, or (--mpi-progress thread) the
// nonblocking ones started and polled by a communication thread as dtune-train's reducer does
// (progress_thread.h; Open MPI picks its algorithms apart for the two: coll/tuned for the blocking
// calls, coll/libnbc for the nonblocking ones). MPI has no 16-bit floating types or
// average: fp16/bf16 reductions use the user-defined ops of core/mpi_reduce_ops.h, and avg is a
// sum followed by a local division, inside the timed
// region because it is part of the operation.
#include <climits>
#include <cstring>
#include <memory>

#include "benchmarks/comm/backend.h"
#include "benchmarks/comm/mpi_buffers.h"
#include "benchmarks/comm/progress_thread.h"
#include "core/error.h"
#include "core/float16.h"
#include "core/hierarchical_allreduce.h"
#include "core/mpi_poll.h"
#include "core/mpi_reduce_ops.h"

namespace dtune::comm {
namespace {

// dtune-comm's ops on top of the shared 16-bit reductions (core/mpi_reduce_ops.h).
class MpiOps {
 public:
  MPI_Op get(Dtype d, ReduceOp op) const {
    const ReduceKind k = op == ReduceOp::kProd  ? ReduceKind::kProd
                         : op == ReduceOp::kMin ? ReduceKind::kMin
                         : op == ReduceOp::kMax ? ReduceKind::kMax
                                                : ReduceKind::kSum;  // avg = sum, then divide
    if (d == Dtype::kFloat16) return ops16_.get(Fp16Kind::kHalf, k);
    if (d == Dtype::kBfloat16) return ops16_.get(Fp16Kind::kBfloat16, k);
    return builtin_op(k);
  }

 private:
  Mpi16BitOps ops16_;
};

MPI_Datatype mpi_type(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
      return MPI_FLOAT;
    case Dtype::kFloat64:
      return MPI_DOUBLE;
    case Dtype::kInt32:
      return MPI_INT32_T;
    case Dtype::kBfloat16:
    case Dtype::kFloat16:
      return MPI_UINT16_T;  // reduced by the user-defined ops above
  }
  return MPI_BYTE;
}

// avg = sum / n, applied to the elements the operation produced.
void divide(Dtype d, void* buf, size_t count, int n) {
  switch (d) {
    case Dtype::kFloat32: {
      auto* p = static_cast<float*>(buf);
      const float inv = 1.0f / static_cast<float>(n);
      for (size_t i = 0; i < count; ++i) p[i] *= inv;
      break;
    }
    case Dtype::kFloat64: {
      auto* p = static_cast<double*>(buf);
      const double inv = 1.0 / n;
      for (size_t i = 0; i < count; ++i) p[i] *= inv;
      break;
    }
    case Dtype::kInt32: {
      auto* p = static_cast<int32_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case Dtype::kFloat16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < count; ++i)
        p[i] = float_to_half(half_to_float(p[i]) / static_cast<float>(n));
      break;
    }
    case Dtype::kBfloat16: {
      auto* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < count; ++i)
        p[i] = float_to_bfloat16(bfloat16_to_float(p[i]) / static_cast<float>(n));
      break;
    }
  }
}

// Host memory, zero-filled at allocation so every page is touched before timing.
class HostBuffers final : public BufferPair {
 public:
  void allocate(size_t send_bytes, size_t recv_bytes) override {
    send_.assign(send_bytes, 0);
    recv_.assign(recv_bytes, 0);
  }
  void* send() override { return send_.data(); }
  void* recv() override { return recv_.data(); }
  void upload(const void* send_host, size_t send_bytes, const void* recv_host,
              size_t recv_bytes) override {
    DTUNE_CHECK(send_bytes <= send_.size() && recv_bytes <= recv_.size(),
                "upload larger than buffers");
    if (send_bytes) std::memcpy(send_.data(), send_host, send_bytes);
    if (recv_bytes) std::memcpy(recv_.data(), recv_host, recv_bytes);
  }
  void download_recv(void* recv_host, size_t recv_bytes) override {
    DTUNE_CHECK(recv_bytes <= recv_.size(), "download larger than buffer");
    std::memcpy(recv_host, recv_.data(), recv_bytes);
  }
  bool on_device() const override { return false; }
  std::string device() const override { return "cpu"; }

 private:
  std::vector<uint8_t> send_, recv_;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(const RunContext& ctx, std::unique_ptr<BufferPair> buffers, Algorithm algorithm,
             MpiProgress progress)
      : comm_(MpiComm::dup(ctx.comm())),
        rank_(ctx.rank()),
        size_(ctx.world_size()),
        buffers_(std::move(buffers)) {
    if (algorithm == Algorithm::kHierarchical)
      hierarchical_ = std::make_unique<HierarchicalAllreduce>(ctx);
    if (progress == MpiProgress::kThread) {
      if (ctx.mpi_thread_level() < MPI_THREAD_SERIALIZED)
        throw UsageError(
            "--mpi-progress thread calls MPI from a communication thread, which needs "
            "MPI_THREAD_SERIALIZED or more; this MPI library provided level " +
            std::to_string(ctx.mpi_thread_level()) + ": use --mpi-progress call");
      progress_ = std::make_unique<ProgressThread>();
    }
  }

  std::string name() const override { return to_string(BackendKind::kMpi); }
  std::string version() const override { return mpi_library_version(); }
  std::string device() const override { return buffers_->device(); }

  void allocate(size_t send_bytes, size_t recv_bytes) override {
    buffers_->allocate(send_bytes, recv_bytes);
  }

  // Counts are C ints in MPI 3.1. On device buffers, avg (a host-side division here) and the
  // 16-bit reductions (user-defined ops, run on the host) are left to NCCL.
  bool supports(const OpShape& s, Placement p) const override {
    if (s.send_count > INT_MAX || s.recv_count > INT_MAX) return false;
    // MPI 3.1 has no nonblocking MPI_Sendrecv_replace.
    if (progress_ && s.collective == Collective::kSendrecv && p == Placement::kInPlace)
      return false;
    if (buffers_->on_device() && is_reduction(s.collective) &&
        (s.op == ReduceOp::kAvg || s.dtype == Dtype::kFloat16 || s.dtype == Dtype::kBfloat16))
      return false;
    return true;
  }

  void upload(const void* send_host, size_t send_bytes, const void* recv_host,
              size_t recv_bytes) override {
    buffers_->upload(send_host, send_bytes, recv_host, recv_bytes);
  }

  void download_recv(void* recv_host, size_t recv_bytes) override {
    buffers_->download_recv(recv_host, recv_bytes);
  }

  size_t result_offset(const OpShape&, Placement) const override { return 0; }

  void run(const OpShape& s, Placement p, int iters, Blocking, Clock::time_point,
           std::vector<double>& times_us) override {
    // The deadline is enforced by the driver's watchdog: a blocking MPI call cannot be left.
    times_us.assign(static_cast<size_t>(iters), 0.0);
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      if (progress_)
        progress_->run([&] { launch_polled(s, p); });
      else
        launch(s, p);
      const auto t1 = Clock::now();
      times_us[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
  }

 private:
  // What every MPI call of one operation takes, for launch() and launch_polled().
  struct CallArgs {
    bool in_place;
    MPI_Comm comm;
    MPI_Datatype type;
    MPI_Op op;
    int count;
    void* send;
    void* recv;
  };
  CallArgs args(const OpShape& s, Placement p) const {
    return {p == Placement::kInPlace,  comm_.get(),      mpi_type(s.dtype), ops_.get(s.dtype, s.op),
            static_cast<int>(s.count), buffers_->send(), buffers_->recv()};
  }

  void launch(const OpShape& s, Placement p) {
    const auto [in_place, comm, type, op, count, send, recv] = args(s, p);
    switch (s.collective) {
      case Collective::kAllreduce:
        if (hierarchical_)
          hierarchical_->run(in_place ? MPI_IN_PLACE : send, recv, count, type, op);
        else
          DTUNE_MPI_CHECK(
              MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, type, op, comm));
        if (s.op == ReduceOp::kAvg) divide(s.dtype, recv, s.count, size_);
        break;
      case Collective::kAllgather:
        DTUNE_MPI_CHECK(
            MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type, comm));
        break;
      case Collective::kReduceScatter:
        DTUNE_MPI_CHECK(
            MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, count, type, op, comm));
        if (s.op == ReduceOp::kAvg) divide(s.dtype, recv, s.count, size_);
        break;
      case Collective::kBroadcast:
        // Out-of-place: the root sends from its send buffer, the others receive into theirs.
        DTUNE_MPI_CHECK(
            MPI_Bcast(in_place || rank_ != s.root ? recv : send, count, type, s.root, comm));
        break;
      case Collective::kReduce:
        if (in_place && rank_ == s.root)
          DTUNE_MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, recv, count, type, op, s.root, comm));
        else
          DTUNE_MPI_CHECK(MPI_Reduce(in_place ? recv : send, recv, count, type, op, s.root, comm));
        if (s.op == ReduceOp::kAvg && rank_ == s.root) divide(s.dtype, recv, s.count, size_);
        break;
      case Collective::kAlltoall:
        DTUNE_MPI_CHECK(
            MPI_Alltoall(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type, comm));
        break;
      case Collective::kSendrecv: {
        const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
        if (in_place)
          DTUNE_MPI_CHECK(
              MPI_Sendrecv_replace(recv, count, type, next, 0, prev, 0, comm, MPI_STATUS_IGNORE));
        else
          DTUNE_MPI_CHECK(MPI_Sendrecv(send, count, type, next, 0, recv, count, type, prev, 0, comm,
                                       MPI_STATUS_IGNORE));
        break;
      }
    }
  }

  // --mpi-progress thread, on the communication thread: the nonblocking form of launch(), polled to
  // completion as dtune-train's reducer polls its buckets (core/mpi_poll.h).
  void launch_polled(const OpShape& s, Placement p) {
    const auto [in_place, comm, type, op, count, send, recv] = args(s, p);
    const void* in = in_place ? MPI_IN_PLACE : send;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    switch (s.collective) {
      case Collective::kAllreduce:
        if (hierarchical_) {
          hierarchical_->start(in, recv, count, type, op);
          poll_to_completion([&] { return hierarchical_->test(); });
          if (s.op == ReduceOp::kAvg) divide(s.dtype, recv, s.count, size_);
          return;
        }
        DTUNE_MPI_CHECK(MPI_Iallreduce(in, recv, count, type, op, comm, &req[0]));
        break;
      case Collective::kAllgather:
        DTUNE_MPI_CHECK(MPI_Iallgather(in, count, type, recv, count, type, comm, &req[0]));
        break;
      case Collective::kReduceScatter:
        DTUNE_MPI_CHECK(MPI_Ireduce_scatter_block(in, recv, count, type, op, comm, &req[0]));
        break;
      case Collective::kBroadcast:
        DTUNE_MPI_CHECK(MPI_Ibcast(in_place || rank_ != s.root ? recv : send, count, type, s.root,
                                   comm, &req[0]));
        break;
      case Collective::kReduce:
        if (in_place && rank_ == s.root)
          DTUNE_MPI_CHECK(MPI_Ireduce(MPI_IN_PLACE, recv, count, type, op, s.root, comm, &req[0]));
        else
          DTUNE_MPI_CHECK(
              MPI_Ireduce(in_place ? recv : send, recv, count, type, op, s.root, comm, &req[0]));
        break;
      case Collective::kAlltoall:
        DTUNE_MPI_CHECK(MPI_Ialltoall(in, count, type, recv, count, type, comm, &req[0]));
        break;
      case Collective::kSendrecv: {  // out-of-place only (supports())
        const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
        DTUNE_MPI_CHECK(MPI_Irecv(recv, count, type, prev, 0, comm, &req[1]));
        DTUNE_MPI_CHECK(MPI_Isend(send, count, type, next, 0, comm, &req[0]));
        break;
      }
    }
    poll_to_completion([&] {
      int flag = 0;
      DTUNE_MPI_CHECK(MPI_Testall(2, req, &flag, MPI_STATUSES_IGNORE));
      return flag != 0;
    });
    const bool average = s.op == ReduceOp::kAvg && is_reduction(s.collective);
    if (average && (s.collective != Collective::kReduce || rank_ == s.root))
      divide(s.dtype, recv, s.count, size_);
  }

  MpiComm comm_;  // private duplicate: the benchmark's traffic never mixes with anything else
  int rank_;
  int size_;
  MpiOps ops_;
  std::unique_ptr<BufferPair> buffers_;
  std::unique_ptr<HierarchicalAllreduce> hierarchical_;  // --algorithm hierarchical
  std::unique_ptr<ProgressThread> progress_;             // --mpi-progress thread
};

}  // namespace

std::unique_ptr<BufferPair> make_host_buffers() { return std::make_unique<HostBuffers>(); }

std::unique_ptr<Backend> make_mpi_backend(const RunContext& ctx, MpiBuffers where,
                                          Algorithm algorithm, MpiProgress progress) {
  return std::make_unique<MpiBackend>(
      ctx, where == MpiBuffers::kDevice ? make_device_buffers(ctx) : make_host_buffers(), algorithm,
      progress);
}

}  // namespace dtune::comm
