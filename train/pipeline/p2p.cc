// Stage-to-stage sends and receives.
#include "train/pipeline/p2p.h"

#include <algorithm>
#include <climits>
#include <thread>

#include "core/error.h"

namespace dtune::train {
namespace {

MPI_Datatype payload_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return MPI_FLOAT;
    case torch::kDouble:
      return MPI_DOUBLE;
    case torch::kHalf:
    case torch::kBFloat16:
      return MPI_UINT16_T;  // moved, never reduced: any 16-bit type will do
    case torch::kLong:
      return MPI_INT64_T;
    default:
      throw Error("pipeline: cannot send dtype " + std::string(c10::toString(t)));
  }
}

// Waits poll MPI (it has no blocking wait that leaves the core free). A wait spins a short while
// (a message that is close arrives without a sleep's latency), then sleeps between polls, the sleep
// doubling up to a cap: a long wait (the bubble; a slower neighbour) then wakes ~2,000 times a
// second instead of 20,000. Each wake-up is a context switch that, when ranks outnumber free cores,
// preempts a stage that computes (the critical path). Against a fixed 50 us sleep and a progress
// thread polling every 20 us, 2 stages of the tiny GPT on 2 cores at load ~8 took a third less CPU
// per step and ran ~20% more samples/s (4 alternating runs each). The cap bounds the latency a
// wait adds once the message is there.
constexpr int kSpinPolls = 64;
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kWaitSleepCap = std::chrono::microseconds(500);
// The progress thread's cap is longer: on shared memory (Open MPI's vader with CMA) the receiver
// copies a large message itself, so the sender's polls only complete requests; across nodes the
// fast first polls after each send serve a receiver that is already waiting.
constexpr auto kProgressSleepCap = std::chrono::microseconds(2000);
// A pipeline's waits repeat every step: the same message arrives about as long after its wait began
// as it did the step before. Within kNearMargin + 1/16 of that time either side, a wait polls every
// kNearSleep (~100 wake-ups in a window of 5 ms) rather than at the cap, so the critical path's
// waits (the first activation on the last stage, the last gradient on the first, the step's
// rendezvous) end within ~50 us of the arrival instead of up to 500 us after it.
constexpr auto kNearMargin = std::chrono::microseconds(500);
constexpr auto kNearSleep = std::chrono::microseconds(50);

class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds cap) : cap_(cap) {}
  // A wait for a message expected `expected` after the wait began (the same message's wait in the
  // previous step): near that time it polls every kNearSleep, so the sleep that doubled to the cap
  // over a long wait does not overshoot the arrival by up to the cap.
  Backoff(std::chrono::microseconds cap, std::chrono::microseconds expected)
      : cap_(cap), expected_(expected) {}
  void pause() {
    if (polls_++ < kSpinPolls) return;
    auto sleep = sleep_;
    if (expected_.count() > 0) {
      const auto waited =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_);
      const auto margin = kNearMargin + expected_ / 16;
      if (waited >= expected_ - margin && waited <= expected_ + margin)
        sleep = kNearSleep;
      else if (waited < expected_ - margin)  // wake at the window's start
        sleep = std::max(kNearSleep, std::min(sleep, expected_ - margin - waited));
    }
    std::this_thread::sleep_for(sleep);
    sleep_ = std::min(cap_, sleep_ * 2);
  }

 private:
  std::chrono::microseconds cap_, expected_{0}, sleep_ = kFirstSleep;
  Clock::time_point start_ = Clock::now();
  int polls_ = 0;
};

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

StageChannel::~StageChannel() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  progress_.join();
}

void StageChannel::progress_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto sleep = kFirstSleep;
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !sends_.empty(); });
    if (stop_) return;
    try {
      poll_locked();
    } catch (const std::exception&) {
      return;  // the main thread's own wait on these sends reports the error
    }
    if (sends_.empty()) {
      sleep = kFirstSleep;
      continue;
    }
    if (new_send_) sleep = kFirstSleep;  // a send posted since the last poll: poll it soon
    new_send_ = false;
    // Woken early by a new send or stop; the back-off as Backoff's, without its spin.
    cv_.wait_for(lock, sleep, [&] { return stop_ || new_send_; });
    sleep = std::min(kProgressSleepCap, sleep * 2);
  }
}

void StageChannel::send(const torch::Tensor& t, int stage, int tag) {
  DTUNE_CHECK(t.dim() <= kMaxDims, "pipeline: tensor of more than 8 dimensions");
  std::unique_lock<std::mutex> lock(mutex_);
  Pending& p = sends_.emplace_back();
  p.stage = stage;
  p.payload = t.detach().to(torch::kCPU).contiguous();
  DTUNE_CHECK(p.payload.numel() <= INT_MAX, "pipeline: activation larger than 2^31 elements");
  p.header.fill(0);
  p.header[0] = static_cast<int64_t>(p.payload.scalar_type());
  p.header[1] = p.payload.dim();
  for (int64_t d = 0; d < p.payload.dim(); ++d) p.header[2 + d] = p.payload.size(d);
  DTUNE_MPI_CHECK(MPI_Isend(p.header.data(), static_cast<int>(p.header.size()), MPI_INT64_T, stage,
                            2 * tag, topo_.pipe(), &p.requests[0]));
  DTUNE_MPI_CHECK(MPI_Isend(p.payload.data_ptr(), static_cast<int>(p.payload.numel()),
                            payload_type(p.payload.scalar_type()), stage, 2 * tag + 1, topo_.pipe(),
                            &p.requests[1]));
  new_send_ = true;
  // Woken after the unlock: woken under it, the progress thread could take this core only to block
  // on the mutex, and the stage that computes would wait for its turn again.
  lock.unlock();
  cv_.notify_all();
}

void StageChannel::wait(MPI_Request& r, const Deadline& deadline, const std::string& what,
                        std::chrono::microseconds expected) {
  Backoff backoff(kWaitSleepCap, expected);
  for (int spins = 0;; ++spins) {
    int done = 0;
    DTUNE_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if ((spins & 63) == 0) {
      poll();
      if (deadline.expired())
        throw TimeoutError("pipeline stage " + std::to_string(topo_.stage()) + " waited past " +
                           "its deadline (--timeout) for " + what +
                           ": that stage stopped, died or is stuck behind another");
    }
    backoff.pause();
  }
}

torch::Tensor StageChannel::recv(int stage, int tag, const torch::Device& device,
                                 const Deadline& deadline, const std::string& what,
                                 double& waited_ms) {
  const auto t0 = Clock::now();
  std::array<int64_t, 2 + kMaxDims> header{};
  MPI_Request r = MPI_REQUEST_NULL;
  const std::string from = topo_.describe(stage) + "'s " + what;
  DTUNE_MPI_CHECK(MPI_Irecv(header.data(), static_cast<int>(header.size()), MPI_INT64_T, stage,
                            2 * tag, topo_.pipe(), &r));
  auto& expected = header_wait_[{stage, tag}];
  wait(r, deadline, from, expected);
  expected = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0);
  std::vector<int64_t> shape(header.begin() + 2, header.begin() + 2 + header[1]);
  torch::Tensor t =
      torch::empty(shape, torch::TensorOptions().dtype(static_cast<torch::ScalarType>(header[0])));
  DTUNE_MPI_CHECK(MPI_Irecv(t.data_ptr(), static_cast<int>(t.numel()),
                            payload_type(t.scalar_type()), stage, 2 * tag + 1, topo_.pipe(), &r));
  wait(r, deadline, from, std::chrono::microseconds(0));  // sent with the header: there or close
  waited_ms += ms_since(t0);
  return t.to(device);
}

void StageChannel::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  poll_locked();
}

void StageChannel::poll_locked() {
  while (!sends_.empty()) {
    int done = 0;
    DTUNE_MPI_CHECK(MPI_Testall(2, sends_.front().requests.data(), &done, MPI_STATUSES_IGNORE));
    if (!done) return;
    sends_.pop_front();
  }
}

void StageChannel::wait_sends(const Deadline& deadline, double& waited_ms) {
  const auto t0 = Clock::now();
  Backoff backoff(kWaitSleepCap);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      poll_locked();
      if (sends_.empty()) break;
      if (deadline.expired())
        throw TimeoutError("pipeline stage " + std::to_string(topo_.stage()) +
                           " waited past its deadline (--timeout) for " +
                           topo_.describe(sends_.front().stage) +
                           " to take what it sent: that stage stopped, died or is stuck");
    }
    backoff.pause();
  }
  waited_ms += ms_since(t0);
}

}  // namespace dtune::train
