// Rank 0's record of one training run as it is measured (results/SCHEMA.md, benchmark "train"):
// the run group is created at the first completed step with the configuration and status
// "running"; every step's records of every rank are appended to extendible datasets ([S, R] and
// [S]) and written out at least every kFlushEveryS seconds and on every way the run ends, so that
// a timeout, a signal or an error leaves every completed step readable. The summary is added to
// the same group at the end (benchmarks/train/train_results.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/h5.h"
#include "core/results_file.h"
#include "train/config.h"
#include "train/outcome.h"

namespace dtune::train {

// Per rank per step: the phases, the step's total, the loss.
inline constexpr size_t kStepFields = kPhases + 2;

// "train-<model>-<precision>-b<batch>": the run group's name after its number.
std::string run_description(const Options& o, int64_t batch);

class StepLog {
 public:
  // `file` may be null (--no-output): the steps are then only kept for the summary.
  StepLog(ResultsFile* file, const Options& o, int64_t batch, size_t ranks);
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // One completed step: `fields` (R, kStepFields) from every rank; `rank0` for the per-step
  // columns every rank shares (loss scale, skipped, profiled).
  void add(const double* fields, const StepRecord& rank0);
  // Writes what is not on disk yet when kFlushEveryS passed since the last write; true if it did.
  bool flush_if_due();
  // Writes every step added, `steps_written`, and flushes the file.
  void flush();
  // The run's last word: every step written, `status`, and `message` when not empty. Nothing
  // when no step completed (there is then no group), or when the run was closed already.
  void close(const std::string& status, const std::string& message);

  // The run group (invalid before the first step or without a file).
  hid_t group() const { return group_.get(); }
  bool has_group() const { return group_.valid(); }
  size_t steps() const { return loss_scale_.size(); }
  double at(size_t step, size_t rank, size_t field) const {
    return rows_[(step * ranks_ + rank) * kStepFields + field];
  }

  static constexpr double kFlushEveryS = 2.0;

 private:
  void open_group();

  ResultsFile* file_;
  const Options& o_;
  int64_t batch_;
  size_t ranks_;
  h5::Handle group_;
  std::vector<h5::Handle>
      columns_;               // kStepFields [S, R] datasets, then loss_scale, skipped, profiled
  std::vector<double> rows_;  // (S, R, kStepFields)
  std::vector<double> loss_scale_;
  std::vector<int64_t> skipped_, profiled_;
  size_t written_ = 0;  // steps on disk
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace dtune::train
