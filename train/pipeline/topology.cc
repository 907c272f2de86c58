// The pipeline's communicators.
#include "train/pipeline/topology.h"

#include "core/error.h"

namespace dtune::train {

PipelinePlace pipeline_place(int rank, int world, int P, PipelineLayout layout) {
  const int D = world / P;
  if (layout == PipelineLayout::kWithinNode) return {rank % P, rank / P};
  return {rank / D, rank % D};
}

int pipeline_rank(int stage, int dp, int world, int P, PipelineLayout layout) {
  const int D = world / P;
  return layout == PipelineLayout::kWithinNode ? dp * P + stage : stage * D + dp;
}

PipelineTopology::PipelineTopology(const RunContext& ctx, int P, PipelineLayout layout)
    : P_(P), D_(ctx.world_size() / P), world_(ctx.world_size()), layout_(layout) {
  place_ = pipeline_place(ctx.rank(), world_, P_, layout_);
  MPI_Comm c = MPI_COMM_NULL;
  DTUNE_MPI_CHECK(MPI_Comm_split(ctx.comm(), place_.dp_index, place_.stage, &c));
  pipe_ = MpiComm(c);
  DTUNE_MPI_CHECK(MPI_Comm_split(ctx.comm(), place_.stage, place_.dp_index, &c));
  dp_ = MpiComm(c);
}

std::string PipelineTopology::describe(int stage) const {
  return "stage " + std::to_string(stage) + " (rank " +
         std::to_string(pipeline_rank(stage, place_.dp_index, world_, P_, layout_)) + ")";
}

}  // namespace dtune::train
