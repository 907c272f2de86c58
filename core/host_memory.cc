// Host memory available (see core/host_memory.h).
#include "core/host_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

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

}  // namespace dtune
