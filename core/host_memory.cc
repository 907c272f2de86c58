// Host memory available (see core/host_memory.h).
#include "core/host_memory.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dtune {

uint64_t host_memory_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key;
    uint64_t kib = 0;
    if (f >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string format_bytes(uint64_t bytes) {
  static const char* kUnit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnit[u]);
  return buf;
}

void refuse_unless_fits(uint64_t per_rank_bytes, int ranks_on_node, uint64_t available,
                        const std::string& host, const std::string& what, const std::string& fix) {
  const uint64_t ranks = static_cast<uint64_t>(ranks_on_node > 0 ? ranks_on_node : 1);
  // Saturating: a per-rank need near 2^64 times the ranks must not wrap round to a small number.
  const uint64_t node = per_rank_bytes > UINT64_MAX / ranks ? UINT64_MAX : per_rank_bytes * ranks;
  if (available == 0 || node <= available) return;
  throw UsageError(what + " needs " + format_bytes(per_rank_bytes) + " of host memory per rank (" +
                   format_bytes(node) + " for the " + std::to_string(ranks) + " rank(s) on " +
                   host + "), but " + format_bytes(available) + " is available there: " + fix);
}

void refuse_unless_host_fits(uint64_t per_rank_bytes, const RunContext& ctx,
                             const std::string& what, const std::string& fix) {
  // The rank whose node leaves the least per rank decides; an unknown MemAvailable is no limit.
  const uint64_t available = host_memory_available_bytes();
  struct {
    double share;
    int rank;
  } mine{available > 0 ? static_cast<double>(available) / ctx.local_size() : INFINITY, ctx.rank()},
      least{};
  DTUNE_MPI_CHECK(MPI_Allreduce(&mine, &least, 1, MPI_DOUBLE_INT, MPI_MINLOC, ctx.comm()));
  if (std::isinf(least.share)) return;
  unsigned long long node_available = available;
  DTUNE_MPI_CHECK(MPI_Bcast(&node_available, 1, MPI_UNSIGNED_LONG_LONG, least.rank, ctx.comm()));
  const int node = ctx.rank_node()[static_cast<size_t>(least.rank)];
  const int ranks =
      static_cast<int>(std::count(ctx.rank_node().begin(), ctx.rank_node().end(), node));
  refuse_unless_fits(per_rank_bytes, ranks, node_available,
                     ctx.node_host()[static_cast<size_t>(node)], what, fix);
}

}  // namespace dtune
