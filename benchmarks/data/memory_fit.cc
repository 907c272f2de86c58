// Refusing what cannot fit in memory (see memory_fit.h).
#include "benchmarks/data/memory_fit.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dtune::data {

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1)
      return static_cast<int64_t>(kib) * 1024;
  }
  return -1;
}

void require_memory(double needed_bytes, const std::string& what, const std::string& fix) {
  const int64_t available = available_memory_bytes();
  if (available < 0 || needed_bytes <= static_cast<double>(available)) return;
  auto gib = [](double b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f GiB", b / (1024.0 * 1024 * 1024));
    return std::string(s);
  };
  std::ostringstream msg;
  msg.precision(0);
  msg << what << " needs " << std::fixed << needed_bytes << " bytes (" << gib(needed_bytes)
      << ") but " << available << " bytes (" << gib(static_cast<double>(available))
      << ") are available (MemAvailable in /proc/meminfo): " << fix;
  throw UsageError(msg.str());
}

}  // namespace dtune::data
