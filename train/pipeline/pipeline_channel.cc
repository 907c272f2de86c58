// The channel's shared part: the default exchange and the choice by --backend.
#include "train/pipeline/pipeline_channel.h"

#include "train/pipeline/p2p.h"

namespace dtune::train {

torch::Tensor PipelineChannel::exchange(const torch::Tensor& mine, int stage, int tag,
                                        const Deadline& deadline, const std::string& what,
                                        double& waited_ms) {
  send(mine.clone(), stage, tag);  // the caller may change `mine` once this returns
  return recv(stage, tag, mine.device(), deadline, what, waited_ms);
}

std::unique_ptr<PipelineChannel> make_pipeline_channel(const Options& o, const RunContext& ctx,
                                                       const PipelineTopology& topo, int device,
                                                       bool swap_ends) {
  if (o.backend == SyncBackend::kNccl)
    return make_nccl_stage_channel(o, ctx, topo, device, swap_ends);
  return std::make_unique<StageChannel>(topo);
}

}  // namespace dtune::train
