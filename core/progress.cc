// Progress lines (see progress.h).
#include "core/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace dtune {

bool progress_enabled(ProgressMode mode) {
  if (mode != ProgressMode::kAuto) return mode == ProgressMode::kAlways;
  if (const char* v = std::getenv("DTUNE_PROGRESS"); v && *v) return std::strcmp(v, "0") != 0;
  return isatty(STDERR_FILENO) == 1;
}

Progress::Progress(std::string what, std::string unit, int64_t total, ProgressMode mode)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(progress_enabled(mode)),
      start_(Clock::now()),
      last_(start_) {}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void Progress::update(int64_t done, const std::string& note) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (now - last_ < std::chrono::seconds(1)) return;
  last_ = now;
  if (total_ > 0)
    std::fprintf(stderr, "%s: %lld of %lld %s (%.0f%%), %.0f s%s%s\n", what_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total_), elapsed_s(),
                 note.empty() ? "" : ", ", note.c_str());
  else
    std::fprintf(stderr, "%s: %lld %s, %.0f s%s%s\n", what_.c_str(), static_cast<long long>(done),
                 unit_.c_str(), elapsed_s(), note.empty() ? "" : ", ", note.c_str());
}

void Progress::say(const std::string& line) {
  if (!enabled_) return;
  last_ = Clock::now();
  std::fprintf(stderr, "%s: %s (%.0f s)\n", what_.c_str(), line.c_str(), elapsed_s());
}

}  // namespace dtune
