// Host memory available (see core/host_memory.h).
#include "core/host_memory.h"

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

void refuse_unless_host_fits(uint64_t per_rank_bytes, int ranks_on_node, const std::string& host,
                             const std::string& what, const std::string& fix) {
  const uint64_t ranks = static_cast<uint64_t>(ranks_on_node > 0 ? ranks_on_node : 1);
  // Saturating: a per-rank need near 2^64 times the ranks must not wrap round to a small number.
  const uint64_t node = per_rank_bytes > UINT64_MAX / ranks ? UINT64_MAX : per_rank_bytes * ranks;
  const uint64_t available = host_memory_available_bytes();
  if (available == 0 || node <= available) return;
  throw UsageError(what + " needs " + format_bytes(per_rank_bytes) + " of host memory per rank (" +
                   format_bytes(node) + " for the " + std::to_string(ranks) + " rank(s) on " +
                   host + "), but " + format_bytes(available) + " is available there: " + fix);
}

}  // namespace dtune
