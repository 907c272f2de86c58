// Where a rank sits in data parallelism x pipeline parallelism, and its communicators, each from
// MPI_Comm_split of the run's world: the pipeline (its P stages, rank = stage), the data-parallel
// group (the D ranks of its stage, rank = data-parallel index; gradients are averaged here).
#pragma once

#include <string>

#include "core/context.h"
#include "core/mpi_session.h"
#include "train/config.h"

namespace dtune::train {

struct PipelinePlace {
  int stage = 0, dp_index = 0;
};
// within-node: stage = rank mod P, dp = rank / P; across-nodes: stage = rank / D, dp = rank mod D.
PipelinePlace pipeline_place(int rank, int world, int P, PipelineLayout layout);
// The world rank of `stage` in the pipeline of data-parallel index `dp`.
int pipeline_rank(int stage, int dp, int world, int P, PipelineLayout layout);

class PipelineTopology {
 public:
  // Collective over ctx.comm(). world must divide by P (checked at parsing).
  PipelineTopology(const RunContext& ctx, int P, PipelineLayout layout);

  int stages() const { return P_; }
  int dp_size() const { return D_; }
  int stage() const { return place_.stage; }
  int dp_index() const { return place_.dp_index; }
  bool first() const { return place_.stage == 0; }
  bool last() const { return place_.stage == P_ - 1; }
  MPI_Comm pipe() const { return pipe_.get(); }
  MPI_Comm dp() const { return dp_.get(); }
  // "stage 2 (rank 5)": how messages name a neighbour.
  std::string describe(int stage) const;

 private:
  int P_, D_, world_;
  PipelineLayout layout_;
  PipelinePlace place_;
  MpiComm pipe_, dp_;
};

}  // namespace dtune::train
