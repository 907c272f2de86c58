// The pipeline's view of the device mesh (train/mesh.h): its P stages (the pp axis, rank in the
// pipeline's communicator = stage) and the data-parallel group of its stage (the dp axis; gradients
// are averaged there).
#pragma once

#include <string>

#include "train/mesh.h"

namespace dtune::train {

class PipelineTopology {
 public:
  explicit PipelineTopology(const DeviceMesh& mesh) : mesh_(mesh) {}

  int stages() const { return mesh_.degree(MeshAxis::kPp); }
  int dp_size() const { return mesh_.degree(MeshAxis::kDp); }
  int stage() const { return mesh_.coord(MeshAxis::kPp); }
  int dp_index() const { return mesh_.coord(MeshAxis::kDp); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == stages() - 1; }
  MPI_Comm pipe() const { return mesh_.comm(MeshAxis::kPp); }
  MPI_Comm dp() const { return mesh_.comm(MeshAxis::kDp); }
  const DeviceMesh& mesh() const { return mesh_; }
  // The world rank of `stage` in this rank's pipeline.
  int rank_of(int stage) const { return mesh_.peer(MeshAxis::kPp, stage); }
  // "stage 2 (rank 5)": how messages name a neighbour.
  std::string describe(int stage) const {
    return "stage " + std::to_string(stage) + " (rank " + std::to_string(rank_of(stage)) + ")";
  }

 private:
  const DeviceMesh& mesh_;
};

}  // namespace dtune::train
