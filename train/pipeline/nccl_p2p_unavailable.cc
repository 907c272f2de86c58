// Builds without NCCL have no NCCL stage channel.
#include "core/error.h"
#include "train/pipeline/pipeline_channel.h"

namespace dtune::train {

std::unique_ptr<PipelineChannel> make_nccl_stage_channel(const Options&, const RunContext&,
                                                         const PipelineTopology&, int, bool) {
  throw UsageError(
      "--backend nccl: this dtune was built without NCCL (see doc/setup.md: NCCL_HOME)");
}

}  // namespace dtune::train
