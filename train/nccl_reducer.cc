// NCCL gradient reducer: reductions run on a dedicated communication stream. start() records an
// event on the compute stream (LibTorch's current stream, where backward wrote the gradients), the
// communication stream waits for it and runs ncclAllReduce, so reductions overlap the rest of
// backward on the GPU; ZeRO-3's prefetched unit gathers go on the same stream, each followed by an
// event the compute stream waits for before the unit is used. wait_all() polls for completion with
// a deadline, then makes the compute stream wait for the communication stream.
#include <c10/cuda/CUDAStream.h>

#include <deque>
#include <utility>
#include <vector>

#include "core/cuda/cuda_error.h"
#include "core/cuda/cuda_handles.h"
#include "core/cuda/nccl_comm.h"
#include "core/error.h"
#include "core/timer.h"
#include "train/reducer.h"

namespace dtune::train {
namespace {

ncclDataType_t nccl_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kLong:
      return ncclInt64;
    case torch::kInt:
      return ncclInt32;
    default:
      throw Error("NCCL reducer: unsupported dtype " + std::string(c10::toString(t.scalar_type())));
  }
}

class NcclReducer final : public Reducer {
 public:
  NcclReducer(MPI_Comm comm, int device, double timeout_s)
      : device_(device), timeout_s_(timeout_s) {
    DTUNE_CUDA_CHECK(cudaSetDevice(device));
    comm_ = NcclComm::create(comm);  // under the set-up's armed watchdog
    stream_ = CudaStream::create();
    ready_ = CudaEvent::create(EventTiming::kDisabled);
    done_ = CudaEvent::create(EventTiming::kDisabled);
  }
  std::string name() const override { return "nccl"; }

  void start(torch::Tensor flat) override {
    release_finished();
    const auto t0 = Clock::now();
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device_).stream();
    ready_.record(compute);
    DTUNE_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
    allreduce_on(flat, ncclSum, stream_.get());
    // The caching allocator must not reuse the bucket's memory while NCCL still reads it.
    flat.record_stream(c10::cuda::getStreamFromExternal(stream_.get(), device_));
    pending_ = true;
    // The kernel itself is on the GPU timeline (CUPTI); this is the CPU-side enqueue.
    if (trace_ && trace_->enabled())
      trace_->add({"ncclAllReduce enqueue bucket " + std::to_string(next_bucket_),
                   TraceTrack::kReductions,
                   t0,
                   Clock::now(),
                   {{"bucket", next_bucket_},
                    {"bytes", flat.numel() * static_cast<int64_t>(flat.element_size())}}});
    ++next_bucket_;
  }

  void start_reduce_scatter(torch::Tensor flat, torch::Tensor shard) override {
    DTUNE_CHECK(flat.is_cuda() && shard.is_cuda() && flat.is_contiguous() && shard.is_contiguous(),
                "NCCL reducer: tensors must be contiguous on the GPU");
    release_finished();
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device_).stream();
    ready_.record(compute);
    DTUNE_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
    DTUNE_NCCL_SETTLE(
        comm_,
        ncclReduceScatter(flat.data_ptr(), shard.data_ptr(), static_cast<size_t>(shard.numel()),
                          nccl_type(flat), ncclSum, comm_.get(), stream_.get()),
        Deadline::after_s(timeout_s_).at());
    const auto on = c10::cuda::getStreamFromExternal(stream_.get(), device_);
    flat.record_stream(on);
    shard.record_stream(on);
    held_.emplace_back(CudaEvent::create(EventTiming::kDisabled),
                       std::vector<torch::Tensor>{std::move(flat), std::move(shard)});
    held_.back().first.record(stream_.get());
    pending_ = true;
    ++next_bucket_;
  }

  int64_t start_allgather(torch::Tensor full) override {
    DTUNE_CHECK(full.is_cuda() && full.is_contiguous(),
                "NCCL reducer: tensors must be contiguous on the GPU");
    release_finished();
    const int64_t part = full.numel() / comm_.size();
    const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device_).stream();
    ready_.record(compute);  // this rank's part is copied in on the compute stream
    DTUNE_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
    DTUNE_NCCL_SETTLE(comm_,
                      ncclAllGather(static_cast<char*>(full.data_ptr()) +
                                        comm_.rank() * part * full.element_size(),
                                    full.data_ptr(), static_cast<size_t>(part), nccl_type(full),
                                    comm_.get(), stream_.get()),
                      Deadline::after_s(timeout_s_).at());
    full.record_stream(c10::cuda::getStreamFromExternal(stream_.get(), device_));
    gathers_.push_back({++tickets_, CudaEvent::create(EventTiming::kDisabled)});
    gathers_.back().second.record(stream_.get());
    pending_ = true;
    return tickets_;
  }

  void wait_gathered(int64_t ticket, const Deadline& /*deadline*/) override {
    // Gathers complete in order on the one stream: waiting for `ticket` covers the older ones.
    while (!gathers_.empty() && gathers_.front().first <= ticket) {
      if (gathers_.front().first == ticket)
        DTUNE_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(),
                                             gathers_.front().second.get(), 0));
      gathers_.pop_front();
    }
  }

  void wait_all(const Deadline& deadline) override {
    if (!pending_) return;
    comm_.wait(stream_.get(), deadline.at(), "gradient reductions");
    held_.clear();  // the stream's work is done
    done_.record(stream_.get());
    DTUNE_CUDA_CHECK(
        cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), done_.get(), 0));
    pending_ = false;
    next_bucket_ = 0;
  }

  void broadcast(torch::Tensor t, int root) override {
    const cudaStream_t s = c10::cuda::getCurrentCUDAStream(device_).stream();
    const auto deadline = Deadline::after_s(timeout_s_).at();
    DTUNE_NCCL_SETTLE(comm_,
                      ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                    nccl_type(t), root, comm_.get(), s),
                      deadline);
    comm_.wait(s, deadline, "broadcast");
  }
  void allreduce_sum(torch::Tensor t) override { blocking(t, ncclSum); }
  void allreduce_max(torch::Tensor t) override { blocking(t, ncclMax); }
  void allgather_in_place(torch::Tensor full) override {
    DTUNE_CHECK(full.is_cuda() && full.is_contiguous(),
                "NCCL reducer: tensors must be contiguous on the GPU");
    const int64_t part = full.numel() / comm_.size();
    const cudaStream_t s = c10::cuda::getCurrentCUDAStream(device_).stream();
    const auto deadline = Deadline::after_s(timeout_s_).at();
    // In place as NCCL defines it: the send buffer is this rank's part of the receive buffer.
    DTUNE_NCCL_SETTLE(
        comm_,
        ncclAllGather(
            static_cast<char*>(full.data_ptr()) + comm_.rank() * part * full.element_size(),
            full.data_ptr(), static_cast<size_t>(part), nccl_type(full), comm_.get(), s),
        deadline);
    comm_.wait(s, deadline, "allgather");
  }

 private:
  // Drops the buffers of the reduce-scatters NCCL has finished with (their events done).
  void release_finished() {
    while (!held_.empty() && held_.front().first.done()) held_.pop_front();
  }
  void allreduce_on(torch::Tensor& t, ncclRedOp_t op, cudaStream_t s) {
    DTUNE_CHECK(t.is_cuda() && t.is_contiguous(),
                "NCCL reducer: tensors must be contiguous on the GPU");
    DTUNE_NCCL_SETTLE(comm_,
                      ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                    nccl_type(t), op, comm_.get(), s),
                      Deadline::after_s(timeout_s_).at());
  }
  void blocking(torch::Tensor& t, ncclRedOp_t op) {
    const cudaStream_t s = c10::cuda::getCurrentCUDAStream(device_).stream();
    allreduce_on(t, op, s);
    comm_.wait(s, Deadline::after_s(timeout_s_).at(), "allreduce");
  }

  int device_;
  double timeout_s_;  // --timeout
  NcclComm comm_;
  CudaStream stream_;
  CudaEvent ready_, done_;
  bool pending_ = false;
  int64_t next_bucket_ = 0;  // index within the step, for the trace
  // start_allgather's tickets not yet waited for, each with the event recorded after its gather.
  std::deque<std::pair<int64_t, CudaEvent>> gathers_;
  int64_t tickets_ = 0;
  // Each reduce-scatter's buffers with the event recorded after it, held until NCCL is done with
  // them, as the MPI reducer's queue holds its own: the gradient sync counts a bucket's flat in
  // flight while its storage lives (grad_sync.h), and the caching allocator could not reuse the
  // block before then either (record_stream). Dropping them at enqueue, as before, let
  // grad_bytes_peak miss every reduce-scatter still running.
  std::deque<std::pair<CudaEvent, std::vector<torch::Tensor>>> held_;
};

}  // namespace

std::unique_ptr<Reducer> make_nccl_reducer(const RunContext& ctx, int device, double timeout_s) {
  return make_nccl_reducer(ctx.comm(), device, timeout_s);
}

std::unique_ptr<Reducer> make_nccl_reducer(MPI_Comm comm, int device, double timeout_s) {
  return std::make_unique<NcclReducer>(comm, device, timeout_s);
}

}  // namespace dtune::train
