// dtune-train's one timeout policy and its fault paths. Every blocking stretch of a run (a whole
// training step with its gradient reductions, found-inf max and divergence check; the parameter
// broadcast; the batch finder's agreement; the gathers of results) runs armed: the process's
// Watchdog (run_main's, MainArgs::watchdog) aborts the job when it lasts past --timeout, naming
// the ranks of this node that stopped or died (a RankBoard every rank marks at each armed stretch).
// At the end of each step, every rank's phase times go to rank 0, which appends them to the results
// file as they come (StepLog), and the ranks agree on a stop request (SIGINT/SIGTERM); on a timeout
// rank 0 writes every completed step and finishes the file with status "timeout" before the job
// goes down.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/main_guard.h"
#include "core/rank_board.h"
#include "core/results_file.h"
#include "core/watchdog.h"
#include "train/config.h"
#include "train/mode_results.h"
#include "train/outcome.h"
#include "train/step_log.h"

namespace dtune::train {

class RunMonitor {
 public:
  // Collective (the rank board): every rank constructs it, once, before training.
  RunMonitor(const Options& o, const MainArgs& a, std::optional<ResultsFile>& file);
  RunMonitor(const RunMonitor&) = delete;
  RunMonitor& operator=(const RunMonitor&) = delete;
  // Destroyed by an exception on its way to main_guard (which aborts the job), the rank board is
  // left to the abort: freeing its window is collective, and the other ranks are elsewhere.
  ~RunMonitor();

  // An armed stretch: disarmed when it goes out of scope (also while an exception unwinds, so
  // that the watchdog never saves while the main thread does).
  class Armed {
   public:
    Armed() = default;  // not armed
    explicit Armed(Watchdog* w) : w_(w) {}
    Armed(Armed&& o) noexcept : w_(o.w_) { o.w_ = nullptr; }
    Armed& operator=(Armed&& o) noexcept {
      if (this != &o) {
        // The same watchdog is re-armed already (arm() ran first): only another one is disarmed.
        if (w_ && w_ != o.w_) w_->disarm();
        w_ = o.w_;
        o.w_ = nullptr;
      }
      return *this;
    }
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;
    ~Armed() { disarm(); }
    void disarm() {
      if (w_) w_->disarm();
      w_ = nullptr;
    }

   private:
    Watchdog* w_ = nullptr;
  };
  // Arms the watchdog for --timeout seconds (other ranks a grace period longer, so that rank 0
  // fires first and saves) and marks the rank board. Every rank arms the same stretches in the
  // same order, so board marks compare across ranks.
  [[nodiscard]] Armed arm(const std::string& what);

  // Rank 0: a new run at `batch` begins (its group is created at its first completed step).
  void begin_run(int64_t batch);
  // Collective, at the end of a step, while armed: every rank's record goes to rank 0; returns
  // true on every rank when any rank asked to stop (a signal).
  bool exchange(const StepRecord& rec);
  // After the step is disarmed, rank 0: the exchanged step into the run's log (written when due).
  void record(const StepRecord& rec);
  // Rank 0: the current run's steps (null elsewhere and before begin_run).
  StepLog* log() { return log_ ? &*log_ : nullptr; }

  // Rank 0 (nothing elsewhere): the current run's group gets every completed step and
  // `run_status` (with `message`), and the file is finished with `file_status` and exit status
  // `code`. Never throws: it runs on the way out of a failure.
  void save(const std::string& run_status, const std::string& file_status, int code,
            const std::string& message);
  // Who of this node stopped, died or is behind (core/rank_board.h).
  std::string diagnose() const { return board_->diagnose(); }
  // This rank ends the job with its own message (core/rank_board.h); another rank of the node
  // that did so first, or "".
  void mark_ended(int code) { board_->mark_ended(code); }
  std::string ended_by() const { return board_->ended_by(); }
  // A mode's own results (mode_results.h), for a save on the way out of a failure (rank 0 writes
  // its own part): shared with the step while the steps run (the watchdog saves while the main
  // thread is blocked in a wait, not touching them), so they outlive a step an exception destroys.
  void watch_mode(std::shared_ptr<const ModeResults> r) { mode_ = std::move(r); }
  const ModeResults* mode() const { return mode_.get(); }
  // Called by save() (rank 0) before the run's group is closed.
  void on_save(std::function<void()> f) { on_save_ = std::move(f); }

  static constexpr double kGraceS = 2.0;

 private:
  const Options& o_;
  const RunContext& ctx_;
  std::optional<ResultsFile>& file_;
  std::unique_ptr<RankBoard> board_;
  Watchdog& watchdog_;  // the process's (run_main's)
  uint64_t marks_ = 0;
  std::optional<StepLog> log_;
  std::shared_ptr<const ModeResults> mode_;
  std::function<void()> on_save_;
  std::vector<double> exchanged_;  // (R, kStepFields + 1): the last step's, the stop flag last
};

}  // namespace dtune::train
