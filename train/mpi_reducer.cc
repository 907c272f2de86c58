// MPI gradient reducer: a communication thread drains a FIFO of buffers with MPI_Iallreduce (and
// ZeRO's MPI_Ireduce_scatter_block and prefetched MPI_Iallgather) on its own communicator
// (MPI_THREAD_MULTIPLE), polled with MPI_Test until done, so reductions progress while the main
// thread computes the rest of backward (Open MPI does not progress nonblocking collectives without
// calls into MPI, so a thread is what makes the overlap real). Polling rather than a blocking
// MPI_Allreduce lets the thread give up a reduction that never completes (a rank stopped) when the
// reducer is destroyed, so the thread is always joined, never detached.
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/hierarchical_allreduce.h"
#include "core/mpi_poll.h"
#include "core/mpi_reduce_ops.h"
#include "train/reducer.h"

namespace dtune::train {
namespace {

MPI_Datatype mpi_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return MPI_FLOAT;
    case torch::kDouble:
      return MPI_DOUBLE;
    case torch::kHalf:
    case torch::kBFloat16:
      return Mpi16BitOps::datatype();
    case torch::kLong:
      return MPI_INT64_T;
    case torch::kInt:
      return MPI_INT32_T;
    default:
      throw Error("MPI reducer: unsupported dtype " + std::string(c10::toString(t.scalar_type())));
  }
}

int comm_size(MPI_Comm comm) {
  int n = 0;
  DTUNE_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

class MpiReducer final : public Reducer {
 public:
  // `comm`: ctx.comm(), or a sub-communicator of it (a pipeline stage's data-parallel group, whose
  // hierarchical form works on the nodes of the group's own ranks).
  MpiReducer(const RunContext& ctx, MPI_Comm comm, ReduceAlgo algo)
      : thread_comm_(MpiComm::dup(comm)),
        main_comm_(MpiComm::dup(comm)),
        hierarchical_(algo != ReduceAlgo::kHierarchical ? nullptr
                      : comm == ctx.comm() ? std::make_unique<HierarchicalAllreduce>(ctx)
                                           : std::make_unique<HierarchicalAllreduce>(comm)),
        ranks_(comm_size(comm)),
        worker_([this] { loop(); }) {}

  ~MpiReducer() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      // A reduction still in flight after wait_all() gave up (a rank stopped; the job is being
      // aborted) is abandoned rather than waited for.
      abandon_ = done_ < started_;
    }
    cv_.notify_all();
    worker_.join();
  }

  std::string name() const override { return "mpi"; }

  void start(torch::Tensor flat) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({Kind::kAllreduce, std::move(flat), torch::Tensor(), next_bucket_++});
      ++started_;
    }
    cv_.notify_all();
  }
  void start_reduce_scatter(torch::Tensor flat, torch::Tensor shard) override {
    DTUNE_CHECK(!hierarchical_, "MPI reducer: reduce-scatter is not hierarchical");
    DTUNE_CHECK(flat.numel() == shard.numel() * ranks_,
                "MPI reducer: reduce-scatter of " + std::to_string(flat.numel()) + " into " +
                    std::to_string(shard.numel()) + " elements over " + std::to_string(ranks_) +
                    " ranks");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({Kind::kReduceScatter, std::move(flat), std::move(shard), next_bucket_++});
      ++started_;
    }
    cv_.notify_all();
  }
  int64_t start_allgather(torch::Tensor full) override {
    DTUNE_CHECK(full.numel() % ranks_ == 0 && full.numel() / ranks_ <= INT_MAX,
                "MPI reducer: allgather of " + std::to_string(full.numel()) + " elements over " +
                    std::to_string(ranks_) + " ranks");
    int64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({Kind::kAllgather, std::move(full), torch::Tensor(), next_gather_++});
      ticket = ++started_;
    }
    cv_.notify_all();
    return ticket;
  }
  void wait_gathered(int64_t ticket, const Deadline& deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_cv_.wait_until(lock, deadline.at(), [&] { return done_ >= ticket || error_; }))
      throw TimeoutError("parameter all-gather " + std::to_string(ticket) +
                         " did not finish in time (--timeout): a rank is not taking part");
    if (error_) std::rethrow_exception(error_);
  }

  void wait_all(const Deadline& deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_cv_.wait_until(lock, deadline.at(), [&] { return done_ == started_ || error_; }))
      throw TimeoutError("gradient reduction " + std::to_string(done_ + 1) + " of " +
                         std::to_string(started_) +
                         " did not finish in time (--timeout): a rank is "
                         "not taking part");
    if (error_) std::rethrow_exception(error_);
    next_bucket_ = next_gather_ = 0;  // the next start() is the first bucket of the next step
  }

  void broadcast(torch::Tensor t, int root) override {
    Staged s(t);
    DTUNE_MPI_CHECK(MPI_Bcast(s.host.data_ptr(), static_cast<int>(s.host.numel()), mpi_type(s.host),
                              root, main_comm_.get()));
    s.finish(t);
  }
  void allreduce_sum(torch::Tensor t) override { allreduce(t, ReduceKind::kSum, main_comm_.get()); }
  void allreduce_max(torch::Tensor t) override { allreduce(t, ReduceKind::kMax, main_comm_.get()); }
  void allgather_in_place(torch::Tensor full) override {
    Staged s(full);
    DTUNE_CHECK(s.host.numel() % ranks_ == 0 && s.host.numel() / ranks_ <= INT_MAX,
                "MPI reducer: allgather of " + std::to_string(s.host.numel()) + " elements over " +
                    std::to_string(ranks_) + " ranks");
    DTUNE_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s.host.data_ptr(),
                                  static_cast<int>(s.host.numel() / ranks_), mpi_type(s.host),
                                  main_comm_.get()));
    s.finish(full);
  }

 private:
  // A contiguous host view of `t` (a copy when `t` is on a device or strided).
  struct Staged {
    explicit Staged(const torch::Tensor& t)
        : host(t.device().is_cpu() && t.is_contiguous() ? t : t.to(torch::kCPU).contiguous()) {}
    void finish(torch::Tensor& t) {
      if (host.data_ptr() != t.data_ptr()) t.copy_(host);
    }
    torch::Tensor host;
  };

  MPI_Op mpi_op(const torch::Tensor& host, ReduceKind kind) {
    const auto type = host.scalar_type();
    return type == torch::kHalf       ? ops16_.get(Fp16Kind::kHalf, kind)
           : type == torch::kBFloat16 ? ops16_.get(Fp16Kind::kBfloat16, kind)
                                      : builtin_op(kind);
  }

  // The caller's thread: blocking (its waits are bounded by the run's watchdog).
  void allreduce(torch::Tensor& t, ReduceKind kind, MPI_Comm comm) {
    Staged s(t);
    DTUNE_CHECK(s.host.numel() <= INT_MAX, "MPI reducer: bucket larger than 2^31 elements");
    DTUNE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, s.host.data_ptr(), static_cast<int>(s.host.numel()),
                                  mpi_type(s.host), mpi_op(s.host, kind), comm));
    s.finish(t);
  }

  // The communication thread: a sum polled to completion, or abandoned when the reducer is
  // destroyed with it in flight (returns false; the request is left to MPI_Abort).
  bool thread_allreduce(torch::Tensor& t) {
    Staged s(t);
    DTUNE_CHECK(s.host.numel() <= INT_MAX, "MPI reducer: bucket larger than 2^31 elements");
    MPI_Request req = MPI_REQUEST_NULL;
    const int count = static_cast<int>(s.host.numel());
    const MPI_Op op = mpi_op(s.host, ReduceKind::kSum);
    const size_t bytes = static_cast<size_t>(s.host.nbytes());
    // Out of place (into a scratch buffer copied back after) where that changes the algorithm:
    // Open MPI's nonblocking allreduce (coll/libnbc) takes a binomial tree for any in-place call
    // and below 4 ranks, and reduce-scatter + allgather out of place from 4 ranks and 64 KiB.
    // dtune-comm --mpi-progress thread, 2 nodes x 2 ranks at 1 Gbit/s, 4 MiB: in place 113 ms,
    // out of place 40 ms; on 2 ranks the copy only costs. dtune model reads the same rows
    // (report/dtune_report/model_inputs.py trainer_placement).
    const bool out_of_place =
        !hierarchical_ && ranks_ >= kOutOfPlaceRanks && bytes >= kOutOfPlaceBytes;
    if (hierarchical_) {
      hierarchical_->start(MPI_IN_PLACE, s.host.data_ptr(), count, mpi_type(s.host), op);
    } else if (out_of_place) {
      if (scratch_.size() < bytes) scratch_.resize(bytes);
      DTUNE_MPI_CHECK(MPI_Iallreduce(s.host.data_ptr(), scratch_.data(), count, mpi_type(s.host),
                                     op, thread_comm_.get(), &req));
    } else {
      DTUNE_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, s.host.data_ptr(), count, mpi_type(s.host), op,
                                     thread_comm_.get(), &req));
    }
    // Polled as core/mpi_poll.h says (dtune-comm --mpi-progress thread measures the same wait).
    const bool done = poll_to_completion(
        [&] {
          if (hierarchical_) return hierarchical_->test();
          int flag = 0;
          DTUNE_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
          return flag != 0;
        },
        &abandon_);
    if (!done) return false;
    if (out_of_place) std::memcpy(s.host.data_ptr(), scratch_.data(), bytes);
    s.finish(t);
    return true;
  }

  // The communication thread: a nonblocking collective polled to completion as the allreduce is;
  // false when abandoned.
  bool poll_request(MPI_Request& req) {
    return poll_to_completion(
        [&] {
          int flag = 0;
          DTUNE_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
          return flag != 0;
        },
        &abandon_);
  }

  // The communication thread: MPI_Ireduce_scatter_block out of place into `shard`, polled as the
  // allreduce is.
  bool thread_reduce_scatter(torch::Tensor& flat, torch::Tensor& shard) {
    Staged in(flat), out(shard);
    DTUNE_CHECK(out.host.numel() <= INT_MAX, "MPI reducer: shard larger than 2^31 elements");
    MPI_Request req = MPI_REQUEST_NULL;
    DTUNE_MPI_CHECK(MPI_Ireduce_scatter_block(
        in.host.data_ptr(), out.host.data_ptr(), static_cast<int>(out.host.numel()),
        mpi_type(in.host), mpi_op(in.host, ReduceKind::kSum), thread_comm_.get(), &req));
    if (!poll_request(req)) return false;
    out.finish(shard);
    return true;
  }

  // The communication thread: MPI_Iallgather in place, polled as the allreduce is.
  bool thread_allgather(torch::Tensor& full) {
    Staged s(full);
    MPI_Request req = MPI_REQUEST_NULL;
    DTUNE_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s.host.data_ptr(),
                                   static_cast<int>(s.host.numel() / ranks_), mpi_type(s.host),
                                   thread_comm_.get(), &req));
    if (!poll_request(req)) return false;
    s.finish(full);
    return true;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      Queued q = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr err;
      const auto t0 = Clock::now();
      try {
        // false: abandoned, the reducer is being destroyed
        if (!(q.kind == Kind::kReduceScatter ? thread_reduce_scatter(q.flat, q.shard)
              : q.kind == Kind::kAllgather   ? thread_allgather(q.flat)
                                             : thread_allreduce(q.flat)))
          return;
      } catch (...) {
        err = std::current_exception();
      }
      if (trace_ && trace_->enabled())
        trace_->add({std::string(q.kind == Kind::kReduceScatter ? "MPI_Reduce_scatter_block"
                                 : q.kind == Kind::kAllgather   ? "MPI_Allgather"
                                                                : "MPI_Allreduce") +
                         (q.kind == Kind::kAllgather ? " gather " : " bucket ") +
                         std::to_string(q.bucket),
                     TraceTrack::kReductions,
                     t0,
                     Clock::now(),
                     {{q.kind == Kind::kAllgather ? "gather" : "bucket", q.bucket},
                      {"bytes", q.flat.numel() * static_cast<int64_t>(q.flat.element_size())}}});
      lock.lock();
      if (err) error_ = err;
      ++done_;
      done_cv_.notify_all();
    }
  }

  MpiComm thread_comm_;                                  // used only by the communication thread
  MpiComm main_comm_;                                    // used only by the caller's thread
  std::unique_ptr<HierarchicalAllreduce> hierarchical_;  // --reduce-algo hierarchical: the thread's
  Mpi16BitOps ops16_;
  static constexpr int kOutOfPlaceRanks = 4;
  static constexpr size_t kOutOfPlaceBytes = 64 << 10;
  int ranks_ = 0;                       // of the reducer's communicator
  std::vector<unsigned char> scratch_;  // the communication thread's receive buffer (out of place)
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  enum class Kind { kAllreduce, kReduceScatter, kAllgather };
  struct Queued {
    Kind kind;
    torch::Tensor flat;   // the buffer reduced, or gathered in place
    torch::Tensor shard;  // a reduce-scatter's output
    int64_t bucket;       // index within the step (of the buckets, or of the gathers)
  };
  std::deque<Queued> queue_;
  int64_t started_ = 0, done_ = 0, next_bucket_ = 0, next_gather_ = 0;
  bool stop_ = false;
  std::atomic<bool> abandon_{false};  // read by the communication thread without the mutex
  std::exception_ptr error_;
  std::thread worker_;  // last: starts after everything it uses exists
};

}  // namespace

std::unique_ptr<Reducer> make_mpi_reducer(const RunContext& ctx, ReduceAlgo algo) {
  return make_mpi_reducer(ctx, ctx.comm(), algo);
}

std::unique_ptr<Reducer> make_mpi_reducer(const RunContext& ctx, MPI_Comm comm, ReduceAlgo algo) {
  if (ctx.mpi_thread_level() != MPI_THREAD_MULTIPLE)
    throw Error(
        "the MPI gradient reducer calls MPI from its communication thread, which needs "
        "MPI_THREAD_MULTIPLE; this MPI library provided level " +
        std::to_string(ctx.mpi_thread_level()) + " (use an MPI built with thread support)");
  return std::make_unique<MpiReducer>(ctx, comm, algo);
}

}  // namespace dtune::train
