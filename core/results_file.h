// One HDF5 results file per invocation, written by rank 0. Created as NAME.partial before anything
// is measured, flushed after every configuration group, renamed to NAME when finished: a crash
// leaves a readable .partial with every group flushed before it, and a finished file appears
// atomically. Two runs never share a file: the .partial is created exclusively (O_EXCL) and held
// under a lock while it is written, and an existing NAME is never replaced unless asked
// (Existing::kOverwrite): the new run takes NAME with .1, .2, ... before its extension instead,
// as nccl-tests numbers its -J files. Layout and statuses: results/SCHEMA.md.
#pragma once

#include <optional>
#include <string>

#include "core/context.h"
#include "core/h5.h"
#include "core/provenance.h"

namespace dtune {

inline constexpr int kSchemaVersion = 1;

// What to do when the requested results file already exists.
enum class Existing {
  kNewName,    // keep it; write NAME.1.h5 (then .2, ...) and say so on stdout
  kOverwrite,  // replace it when this run finishes (--overwrite)
};

class ResultsFile {
 public:
  // Creates PATH.partial (and missing parent directories), exclusively. Throws UsageError naming
  // `flag` when the path cannot be written, or when another live run is writing PATH.partial and
  // `existing` forbids another name. A stale PATH.partial (its writer died) is kept, as it holds
  // measured data, unless `existing` is kOverwrite.
  static ResultsFile create(const std::string& path, const std::string& tool,
                            const std::string& flag, Existing existing = Existing::kNewName);
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
  // Writes status, exit status and end time, closes, and renames PATH.partial to PATH (with
  // kNewName, never over a file that appeared meanwhile: then the next free number, said on
  // stdout). A file with no runs and a status other than "complete" is removed instead: nothing
  // was measured, so nothing is lost.
  void finish(const std::string& status, int exit_status);

  // The final name (it may differ from the one asked for; see Existing).
  const std::string& path() const { return path_; }
  int runs() const { return runs_; }

 private:
  ResultsFile() = default;
  std::string requested_path_;  // as given; numbered names derive from it
  std::string path_;
  std::string partial_path_;
  h5::Handle file_;
  h5::Handle runs_group_;
  int lock_fd_ = -1;  // holds an open-file-description lock on partial_path_ while writing
  Existing existing_ = Existing::kNewName;
  int runs_ = 0;
  bool finished_ = true;
};

// NAME.h5 -> NAME.<n>.h5 (a name without an extension gets .<n> appended).
std::string numbered_path(const std::string& path, int n);

// Collective: rank 0 creates the file, every rank learns whether that worked, so a bad path is a
// UsageError on every rank (exit 2 everywhere, no rank left waiting). Empty on other ranks.
std::optional<ResultsFile> create_results_on_root(const RunContext& ctx, const std::string& path,
                                                  const std::string& tool, const std::string& flag,
                                                  Existing existing = Existing::kNewName);

// results/<tool>-<UTC timestamp>-<pid>.h5 under `dir` (the default --output).
std::string default_results_path(const std::string& dir, const std::string& tool);

}  // namespace dtune
