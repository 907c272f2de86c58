// How a pipeline stage's tensors travel to the other stages of its pipeline: the runner sees only
// this interface and make_pipeline_channel() picks the implementation from --backend. mpi:
// StageChannel (p2p.h), MPI point-to-point with a progress thread, device tensors staged through
// host memory. nccl (--device cuda): NcclStageChannel (nccl_p2p.cc), ncclSend/ncclRecv between
// neighbouring stages on their own communicators and CUDA streams; host tensors (the runner's
// control messages) still over MPI.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>

#include "core/context.h"
#include "core/deadline.h"
#include "train/config.h"
#include "train/pipeline/topology.h"

namespace dtune::train {

// Tags: each (sender, tag) pair is one transfer of a step, sent once and received once; a tag's
// lowest bit says which way it flows: even towards the next virtual stage (activations), odd
// towards the previous one (their gradients). A tensor sent from the GPU is received onto the GPU
// (`device` of recv), and a host tensor onto the host: the NCCL channel keeps each way between two
// neighbours as one ordered link, and routes host tensors over MPI.
class PipelineChannel {
 public:
  virtual ~PipelineChannel() = default;
  // "mpi" or "nccl": recorded as the run's pipeline_channel.
  virtual std::string name() const = 0;

  // Starts sending `t` to `stage` under `tag` and returns; `t` must not change in place afterwards
  // (activations and their gradients never do).
  virtual void send(const torch::Tensor& t, int stage, int tag) = 0;
  // The tensor `stage` sent under `tag`, on `device`, once it is there; past `deadline` a
  // TimeoutError that names `stage` and `what` ("the activation of micro-batch 3"). Adds the time
  // blocked to `waited_ms`.
  virtual torch::Tensor recv(int stage, int tag, const torch::Device& device,
                             const Deadline& deadline, const std::string& what,
                             double& waited_ms) = 0;
  // Both stages call it at the same point with tensors of one shape: sends `mine` to `stage` and
  // returns what `stage` sent, on mine's device. `mine` may change as soon as it returns. This
  // default sends a copy, then receives.
  virtual torch::Tensor exchange(const torch::Tensor& mine, int stage, int tag,
                                 const Deadline& deadline, const std::string& what,
                                 double& waited_ms);
  // Completes the sends that are done, without blocking.
  virtual void poll() = 0;
  // Blocks until every send completed (their receivers took them), adding the time to
  // `waited_ms`; past `deadline` a TimeoutError naming the stage that did not take one.
  virtual void wait_sends(const Deadline& deadline, double& waited_ms) = 0;
};

// --backend mpi: StageChannel. --backend nccl: NcclStageChannel on GPU `device` (its ordinal),
// each NCCL wait bounded by `o.timeout_s`; `swap_ends`: whether the end stages exchange tied
// gradients (exchange() between stage 0 and P - 1), which gets its own communicator. Collective
// over the pipeline's ranks (and, for nccl, the run's: every rank checks that no two ranks of a
// pipeline or stage group share a GPU, which NCCL refuses). Builds without NCCL: --backend nccl
// throws UsageError.
std::unique_ptr<PipelineChannel> make_pipeline_channel(const Options& o, const RunContext& ctx,
                                                       const PipelineTopology& topo, int device,
                                                       bool swap_ends);
std::unique_ptr<PipelineChannel> make_nccl_stage_channel(const Options& o, const RunContext& ctx,
                                                         const PipelineTopology& topo, int device,
                                                         bool swap_ends);

}  // namespace dtune::train
