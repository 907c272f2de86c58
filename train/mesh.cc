// The device mesh's layout and communicators.
#include "train/mesh.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace dtune::train {

std::array<int, kMeshAxes> MeshShape::coords(int rank) const {
  std::array<int, kMeshAxes> c{};
  for (MeshAxis a : order) {
    const int d = (*this)[a];
    c[static_cast<size_t>(a)] = rank % d;
    rank /= d;
  }
  return c;
}

int MeshShape::rank(const std::array<int, kMeshAxes>& coords) const {
  int r = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    r = r * (*this)[*it] + coords[static_cast<size_t>(*it)];
  return r;
}

std::string MeshShape::describe() const {
  std::string s;
  for (MeshAxis a : {MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kTp})
    if ((*this)[a] > 1 || (a == MeshAxis::kDp && world() == 1)) {
      if (!s.empty()) s += " x ";
      s += to_string(a) + std::to_string((*this)[a]);
    }
  return s + " (order " + to_string(order) + ")";
}

MeshShape make_mesh_shape(int world, int tp, int pp, const MeshOrder& order) {
  if (tp < 1 || pp < 1 || world % (tp * pp) != 0)
    throw UsageError(
        (tp == 1 ? "--pipeline-stages " + std::to_string(pp)
                 : "--tp " + std::to_string(tp) + " x --pipeline-stages " + std::to_string(pp)) +
        " does not divide the " + std::to_string(world) + " ranks: launch a multiple of " +
        std::to_string(tp * pp) + " ranks (data-parallel groups x stages" +
        (tp == 1 ? "" : " x tensor ranks") + ")");
  MeshShape m;
  m.degree[static_cast<size_t>(MeshAxis::kTp)] = tp;
  m.degree[static_cast<size_t>(MeshAxis::kPp)] = pp;
  m.degree[static_cast<size_t>(MeshAxis::kDp)] = world / (tp * pp);
  m.order = order;
  return m;
}

MeshOrder parse_mesh_order(const std::string& text) {
  const std::string usage = "--mesh-order '" + text +
                            "': give the axes tp, pp and dp once each, innermost first, "
                            "e.g. tp,pp,dp (the default) or tp,dp,pp";
  MeshOrder order{};
  std::istringstream in(text);
  std::string name;
  size_t n = 0;
  while (std::getline(in, name, ',')) {
    if (n == order.size()) throw UsageError(usage);
    bool known = false;
    for (const auto& e : kMeshAxisNames)
      if (e.name == name) {
        order[n++] = e.value;
        known = true;
      }
    if (!known) throw UsageError(usage);
  }
  if (n != order.size() || text.empty() || text.back() == ',') throw UsageError(usage);
  for (MeshAxis a : {MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp})
    if (std::count(order.begin(), order.end(), a) != 1) throw UsageError(usage);
  return order;
}

DeviceMesh::DeviceMesh(MPI_Comm world, int rank, const MeshShape& shape)
    : shape_(shape), rank_(rank), coords_(shape.coords(rank)) {
  for (MeshAxis a : {MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp}) {
    // The ranks that share every other coordinate: the colour is the rank at coordinate 0 on `a`.
    std::array<int, kMeshAxes> base = coords_;
    base[static_cast<size_t>(a)] = 0;
    MPI_Comm c = MPI_COMM_NULL;
    DTUNE_MPI_CHECK(MPI_Comm_split(world, shape_.rank(base), coord(a), &c));
    comms_[static_cast<size_t>(a)] = MpiComm(c);
  }
}

int DeviceMesh::peer(MeshAxis a, int index) const {
  std::array<int, kMeshAxes> c = coords_;
  c[static_cast<size_t>(a)] = index;
  return shape_.rank(c);
}

}  // namespace dtune::train
