// Node identity from gathered host names and boot ids.
#include "core/node_map.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "core/error.h"

namespace dtune {

std::string boot_id() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return boot;
}

std::string node_key() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return std::string(host) + " " + boot_id();
}

NodeMap node_map_from_keys(const std::vector<std::string>& keys, int rank) {
  DTUNE_CHECK(rank >= 0 && static_cast<size_t>(rank) < keys.size(), "node map: rank out of range");
  NodeMap m;
  std::map<std::string, int> index;
  for (const std::string& k : keys) {
    auto [it, added] = index.emplace(k, static_cast<int>(m.node_host.size()));
    if (added) m.node_host.push_back(k.substr(0, k.find(' ')));
    m.rank_node.push_back(it->second);
  }
  m.node = m.rank_node[static_cast<size_t>(rank)];
  m.local_size = 0;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (m.rank_node[r] != m.node) continue;
    if (static_cast<int>(r) < rank) ++m.local_rank;
    ++m.local_size;
  }
  return m;
}

NodeMap derive_node_map(MPI_Comm comm) {
  int rank = 0, n = 1;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTUNE_MPI_CHECK(MPI_Comm_size(comm, &n));
  const std::string mine = node_key();
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  DTUNE_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int i = 0; i < n; ++i) {
    displs[static_cast<size_t>(i)] = total;
    total += lens[static_cast<size_t>(i)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  DTUNE_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                                 MPI_CHAR, comm));
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i)
    keys.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(i)]),
                              static_cast<size_t>(lens[static_cast<size_t>(i)])));
  return node_map_from_keys(keys, rank);
}

int launcher_local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

}  // namespace dtune
