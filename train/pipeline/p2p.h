// Point-to-point transfers between neighbouring pipeline stages over MPI: activations forward,
// their gradients backward. A send is nonblocking (MPI_Isend of a small header, dtype and shape,
// then the payload, both kept alive until complete), so a stage computes on while its output
// travels; a receive blocks until the tensor is there or a deadline passes, then throws a
// TimeoutError that names the stage it waited for. Device tensors are staged through host memory.
// A progress thread polls the sends in flight while the main thread computes (as the reducer's
// thread does: Open MPI moves a large message only inside MPI calls, so without it a send would
// wait for this stage's next call, after its next forward or backward): often right after each
// send, then less and less often (p2p.cc says why). MPI_THREAD_MULTIPLE.
#pragma once

#include <torch/types.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/deadline.h"
#include "train/pipeline/pipeline_channel.h"
#include "train/pipeline/topology.h"

namespace dtune::train {

class StageChannel final : public PipelineChannel {
 public:
  explicit StageChannel(const PipelineTopology& topo)
      : topo_(topo), progress_([this] { progress_loop(); }) {}
  StageChannel(const StageChannel&) = delete;
  StageChannel& operator=(const StageChannel&) = delete;
  // Joins the progress thread; sends still in flight are left to MPI_Abort or MPI_Finalize
  // (wait_sends ran on success).
  ~StageChannel() override;
  std::string name() const override { return "mpi"; }

  // Starts sending `t` to `stage` under `tag` (tags are per micro-batch, chunk and direction).
  // A host tensor is sent from its own memory: the caller must not change it in place afterwards
  // (activations and their gradients never are), or must send a copy.
  void send(const torch::Tensor& t, int stage, int tag) override;
  // The tensor `stage` sent under `tag`, on `device`. `what` ("the activation of micro-batch 3")
  // names it in the timeout message. Adds the time blocked to `waited_ms`.
  torch::Tensor recv(int stage, int tag, const torch::Device& device, const Deadline& deadline,
                     const std::string& what, double& waited_ms) override;
  // Completes the sends that are done, without blocking.
  void poll() override;
  // Blocks until every send completed (their receivers took them), adding the time to
  // `waited_ms`.
  void wait_sends(const Deadline& deadline, double& waited_ms) override;

 private:
  static constexpr int kMaxDims = 8;
  struct Pending {
    std::array<int64_t, 2 + kMaxDims> header;  // dtype, ndim, dims
    torch::Tensor payload;                     // host, contiguous
    std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int stage = 0;
  };
  // `expected`: when the message should arrive after the wait began (0: unknown).
  void wait(MPI_Request& r, const Deadline& deadline, const std::string& what,
            std::chrono::microseconds expected);
  void poll_locked();
  void progress_loop();

  const PipelineTopology& topo_;
  std::mutex mutex_;  // guards sends_, new_send_ and stop_
  std::condition_variable cv_;
  std::deque<Pending> sends_;  // a deque: elements never move while MPI holds their buffers
  bool new_send_ = false;      // posted since the progress thread's last poll
  bool stop_ = false;
  // How long each (stage, tag) header took to arrive after its receive was posted, last time: the
  // next wait for it polls often around then (p2p.cc). The main thread's alone, as recv is.
  std::map<std::pair<int, int>, std::chrono::microseconds> header_wait_;
  std::thread progress_;  // last: starts after everything it uses exists
};

}  // namespace dtune::train
