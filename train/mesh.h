// The device mesh: a run's ranks laid out on named axes, one per kind of parallelism (torchtitan's
// ParallelDims and DeviceMesh, Megatron-LM's parallel_state): tp (tensor; degree 1 until tensor
// parallelism exists), pp (pipeline stages, --pp / --pipeline-stages) and dp (data parallelism: the
// ranks left, world / (tp x pp)). Consecutive ranks fill the innermost axis of --mesh-order first;
// the default tp,pp,dp puts a pipeline's stages on consecutive ranks (one node) and the
// data-parallel groups outside them (the older --pipeline-layout within-node); tp,dp,pp makes a
// stage's data-parallel group consecutive instead (across-nodes). A rank's coordinate on an axis is
// its index in that axis's communicator: the ranks whose other coordinates equal its own. Every
// place that needs a degree, a coordinate or a peer asks the mesh.
#pragma once

#include <array>
#include <string>

#include "core/mpi_session.h"
#include "train/config.h"

namespace dtune::train {

// The mesh's degrees and order, and where each rank sits in it: no communication.
struct MeshShape {
  std::array<int, kMeshAxes> degree{1, 1, 1};  // indexed by MeshAxis
  MeshOrder order = kDefaultMeshOrder;

  int operator[](MeshAxis a) const { return degree[static_cast<size_t>(a)]; }
  int world() const { return degree[0] * degree[1] * degree[2]; }
  // Rank r's coordinates (indexed by MeshAxis): r's digits in the mixed radix of the degrees,
  // innermost axis least significant.
  std::array<int, kMeshAxes> coords(int rank) const;
  // The rank at `coords`; the inverse of coords().
  int rank(const std::array<int, kMeshAxes>& coords) const;
  // "dp2 x pp2 (order tp,pp,dp)": the axes with degree > 1 (dp1 for one rank).
  std::string describe() const;
};

// dp = world / (tp x pp). Throws UsageError when tp x pp does not divide the ranks.
MeshShape make_mesh_shape(int world, int tp, int pp, const MeshOrder& order);
// --mesh-order's value: a permutation of tp, pp and dp, comma-separated, innermost first. Throws
// UsageError naming the flag otherwise.
MeshOrder parse_mesh_order(const std::string& text);

class DeviceMesh {
 public:
  // Collective over `world` (whose size is shape.world() and in which this process is `rank`): one
  // communicator per axis, from MPI_Comm_split (rank in it = the coordinate on that axis).
  DeviceMesh(MPI_Comm world, int rank, const MeshShape& shape);
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int degree(MeshAxis a) const { return shape_[a]; }
  int coord(MeshAxis a) const { return coords_[static_cast<size_t>(a)]; }
  int rank() const { return rank_; }
  MPI_Comm comm(MeshAxis a) const { return comms_[static_cast<size_t>(a)].get(); }
  // The world rank at `index` on axis a, its other coordinates this rank's (a peer on that axis).
  int peer(MeshAxis a, int index) const;

 private:
  MeshShape shape_;
  int rank_;
  std::array<int, kMeshAxes> coords_{};
  std::array<MpiComm, kMeshAxes> comms_;
};

}  // namespace dtune::train
