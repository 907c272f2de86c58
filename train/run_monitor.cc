// Watchdog, rank board, per-step exchange and the saves on the way out.
#include "train/run_monitor.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/signals.h"

namespace dtune::train {

RunMonitor::RunMonitor(const Options& o, const MainArgs& a, std::optional<ResultsFile>& file)
    : o_(o),
      ctx_(a.ctx),
      file_(file),
      board_(std::make_unique<RankBoard>(a.ctx)),
      watchdog_(a.watchdog) {
  // On the watchdog's thread, while the main thread is blocked inside the armed stretch (it
  // touches the log and the file only while disarmed).
  watchdog_.on_fire([this] { return board_->diagnose(); },
                    [this] {
                      board_->mark_ended(kTimeoutExitStatus);
                      save("timeout", "timeout", kTimeoutExitStatus,
                           "a rank did not take part within --timeout");
                    });
}

RunMonitor::~RunMonitor() {
  watchdog_.disarm();
  watchdog_.on_fire(nullptr, nullptr);  // they capture this object
  if (std::uncaught_exceptions() > 0) (void)board_.release();
}

RunMonitor::Armed RunMonitor::arm(const std::string& what) {
  board_->reach(++marks_);
  watchdog_.arm(o_.timeout_s + (ctx_.is_root() ? 0.0 : kGraceS), what);
  return Armed(&watchdog_);
}

void RunMonitor::begin_run(int64_t batch) {
  log_.reset();
  if (ctx_.is_root())
    log_.emplace(file_ ? &*file_ : nullptr, o_, batch, static_cast<size_t>(ctx_.world_size()));
}

bool RunMonitor::exchange(const StepRecord& rec) {
  std::vector<double> mine(rec.phases.begin(), rec.phases.end());
  mine.push_back(rec.total_ms);
  mine.push_back(rec.loss);
  mine.push_back(stop_requested() ? 1.0 : 0.0);
  exchanged_.resize(mine.size() * static_cast<size_t>(ctx_.world_size()));
  DTUNE_MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE,
                                exchanged_.data(), static_cast<int>(mine.size()), MPI_DOUBLE,
                                ctx_.comm()));
  bool stop = false;
  for (size_t r = 0; r < static_cast<size_t>(ctx_.world_size()); ++r)
    stop |= exchanged_[r * mine.size() + kStepFields] != 0;
  return stop;
}

void RunMonitor::record(const StepRecord& rec) {
  if (!log_) return;
  const size_t R = static_cast<size_t>(ctx_.world_size());
  std::vector<double> fields(R * kStepFields);
  for (size_t r = 0; r < R; ++r)
    std::copy_n(exchanged_.begin() + static_cast<long>(r * (kStepFields + 1)), kStepFields,
                fields.begin() + static_cast<long>(r * kStepFields));
  log_->add(fields.data(), rec);
  if (log_->flush_if_due() && file_) {
    std::printf("# %zu of %d steps done, written to the results file\n", log_->steps(),
                o_.warmup_steps + o_.steps);
    std::fflush(stdout);
  }
}

void RunMonitor::save(const std::string& run_status, const std::string& file_status, int code,
                      const std::string& message) {
  if (!ctx_.is_root()) return;
  try {
    if (on_save_) on_save_();
    if (log_) log_->close(run_status, message);
    if (file_) {
      file_->finish(file_status, code);
      if (file_->runs() > 0)
        std::printf("# Results (%s): %s\n", file_status.c_str(), file_->path().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtune-train: warning: could not save the measured steps: %s\n", e.what());
  }
  std::fflush(stdout);
}

}  // namespace dtune::train
