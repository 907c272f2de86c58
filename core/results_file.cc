// Results file lifecycle: partial, flushed per group, renamed when finished.
#include "core/results_file.h"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/build_info.h"
#include "core/error.h"
#include "core/gather.h"

namespace dtune {

namespace fs = std::filesystem;

ResultsFile ResultsFile::create(const std::string& path, const std::string& tool,
                                const std::string& flag) {
  if (path.empty()) throw UsageError(flag + ": empty path");
  ResultsFile f;
  f.path_ = path;
  f.partial_path_ = path + ".partial";
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec)
    throw UsageError(flag + " '" + path + "': cannot create directory '" + parent.string() +
                     "' (" + ec.message() + "); choose a writable location");
  if (fs::is_directory(path, ec))
    throw UsageError(flag + " '" + path + "' is a directory; give a file name such as " +
                     (fs::path(path) / "comm.h5").string());
  // Try the open ourselves first, for a clear message (HDF5's is "unable to truncate a file").
  if (FILE* probe = std::fopen(f.partial_path_.c_str(), "wb")) {
    std::fclose(probe);
  } else {
    throw UsageError(flag + " '" + path + "': cannot write there (" +
                     std::error_code(errno, std::generic_category()).message() +
                     "); choose a writable location");
  }
  f.file_ = h5::create_file(f.partial_path_);
  f.finished_ = false;
  const hid_t root = f.file_.get();
  h5::write_attr(root, "schema", "dtune-results");
  h5::write_attr(root, "schema_version", static_cast<int64_t>(kSchemaVersion));
  h5::write_attr(root, "tool", tool);
  h5::write_attr(root, "dtune_version", build_info::dtune_version());
  h5::write_attr(root, "status", "running");
  f.runs_group_ = h5::create_group(root, "runs");
  f.flush();
  return f;
}

ResultsFile::ResultsFile(ResultsFile&& o) noexcept
    : path_(std::move(o.path_)),
      partial_path_(std::move(o.partial_path_)),
      file_(std::move(o.file_)),
      runs_group_(std::move(o.runs_group_)),
      runs_(o.runs_),
      finished_(o.finished_) {
  o.finished_ = true;
}

ResultsFile& ResultsFile::operator=(ResultsFile&& o) noexcept {
  if (this != &o) {
    this->~ResultsFile();
    path_ = std::move(o.path_);
    partial_path_ = std::move(o.partial_path_);
    file_ = std::move(o.file_);
    runs_group_ = std::move(o.runs_group_);
    runs_ = o.runs_;
    finished_ = o.finished_;
    o.finished_ = true;
  }
  return *this;
}

ResultsFile::~ResultsFile() {
  if (finished_) return;
  try {
    finish("failed", 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtune: warning: could not finish results file %s: %s\n",
                 partial_path_.c_str(), e.what());
  }
}

void ResultsFile::write_provenance(const Provenance& p) {
  dtune::write_provenance(file_.get(), p);
  flush();
}

h5::Handle ResultsFile::new_run(const std::string& description) {
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%04d-", runs_++);
  return h5::create_group(runs_group_.get(), prefix + description);
}

void ResultsFile::flush() { h5::flush(file_.get()); }

void ResultsFile::finish(const std::string& status, int exit_status) {
  if (finished_) return;
  finished_ = true;
  const hid_t root = file_.get();
  h5::write_attr(root, "status", status);
  h5::write_attr(root, "exit_status", static_cast<int64_t>(exit_status));
  if (H5Lexists(root, "provenance", H5P_DEFAULT) > 0) {
    h5::Handle prov = h5::open_group(root, "provenance");
    h5::write_attr(prov.get(), "end_time", iso8601_utc_now());
  }
  runs_group_.close();
  file_.close();
  std::error_code ec;
  if (runs_ == 0 && status != "complete") {
    fs::remove(partial_path_, ec);
    return;
  }
  fs::rename(partial_path_, path_, ec);
  if (ec)
    throw Error("cannot rename " + partial_path_ + " to " + path_ + ": " + ec.message() +
                " (the results are in the .partial file)");
}

std::optional<ResultsFile> create_results_on_root(const RunContext& ctx, const std::string& path,
                                                  const std::string& tool, const std::string& flag) {
  std::optional<ResultsFile> file;
  std::string error;
  if (ctx.is_root()) {
    try {
      file.emplace(ResultsFile::create(path, tool, flag));
    } catch (const UsageError& e) {
      error = e.what();
    }
  }
  error = broadcast_string(ctx.comm(), error);
  if (!error.empty()) throw UsageError(error);
  return file;
}

std::string default_results_path(const std::string& dir, const std::string& tool) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return (fs::path(dir) / (tool + "-" + stamp + "-" + std::to_string(getpid()) + ".h5")).string();
}

}  // namespace dtune
