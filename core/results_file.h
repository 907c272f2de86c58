// One HDF5 results file per invocation, written by rank 0. Created as NAME.partial before anything
// is measured, flushed after every configuration group, renamed to NAME when finished: a crash
// leaves a readable .partial with every group flushed before it, and a finished file appears
// atomically. Layout and statuses: results/SCHEMA.md.
#pragma once

#include <optional>
#include <string>

#include "core/context.h"
#include "core/h5.h"
#include "core/provenance.h"

namespace dtune {

inline constexpr int kSchemaVersion = 1;

class ResultsFile {
 public:
  // Creates PATH.partial (and missing parent directories). Throws UsageError naming `flag` when
  // the path cannot be written.
  static ResultsFile create(const std::string& path, const std::string& tool,
                            const std::string& flag);
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;
  ResultsFile(ResultsFile&& other) noexcept;
  ResultsFile& operator=(ResultsFile&& other) noexcept;  // finishes this one first ("failed")
  // Not finished (an exception unwound past it): finishes with status "failed", never throws.
  ~ResultsFile();

  void write_provenance(const Provenance& p);
  // A new group /runs/NNNN-description.
  h5::Handle new_run(const std::string& description);
  // Flush to disk: everything written so far survives a crash.
  void flush();
  // Writes status, exit status and end time, closes, and renames PATH.partial to PATH.
  // A file with no runs and a status other than "complete" is removed instead: nothing was
  // measured, so nothing is lost.
  void finish(const std::string& status, int exit_status);

  const std::string& path() const { return path_; }
  int runs() const { return runs_; }

 private:
  ResultsFile() = default;
  std::string path_;
  std::string partial_path_;
  h5::Handle file_;
  h5::Handle runs_group_;
  int runs_ = 0;
  bool finished_ = true;
};

// Collective: rank 0 creates the file, every rank learns whether that worked, so a bad path is a
// UsageError on every rank (exit 2 everywhere, no rank left waiting). Empty on other ranks.
std::optional<ResultsFile> create_results_on_root(const RunContext& ctx, const std::string& path,
                                                  const std::string& tool, const std::string& flag);

// results/<tool>-<UTC timestamp>-<pid>.h5 under `dir` (the default --output).
std::string default_results_path(const std::string& dir, const std::string& tool);

}  // namespace dtune
