// Progress lines on stderr for work that can take more than a few seconds (the batch finder's
// probes, indexing a dataset, converting one): "dtune-data: convert: 120 of 3000 files (4%), 12 s".
// Shown when stderr is a terminal, or when asked (a --progress flag or DTUNE_PROGRESS=1); quiet in
// logs and pipes otherwise (DTUNE_PROGRESS=0 silences a terminal too). At most one line per
// second, so a fast job prints nothing but its result. Rank 0's job: other ranks pass kNever.
#pragma once

#include <cstdint>
#include <string>

#include "core/deadline.h"

namespace dtune {

enum class ProgressMode { kAuto, kAlways, kNever };

// kAuto resolved: DTUNE_PROGRESS (1/0) if set, else whether stderr is a terminal.
bool progress_enabled(ProgressMode mode);

class Progress {
 public:
  // `what` prefixes every line ("dtune-data: convert"); `unit` names what is counted ("files");
  // total 0: unknown (no percentage).
  Progress(std::string what, std::string unit, int64_t total, ProgressMode mode);
  // `done` of total so far, with an optional note ("batch 64"); prints when a second has passed.
  void update(int64_t done, const std::string& note = "");
  // A line now, whatever the time (a stage starting: "probing batch 64").
  void say(const std::string& line);
  bool enabled() const { return enabled_; }
  double elapsed_s() const;

 private:
  std::string what_, unit_;
  int64_t total_ = 0;
  bool enabled_ = false;
  Clock::time_point start_, last_;
};

}  // namespace dtune
