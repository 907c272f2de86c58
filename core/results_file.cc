// Results file lifecycle: partial, flushed per group, renamed when finished.
#include "core/results_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/build_info.h"
#include "core/error.h"
#include "core/gather.h"

namespace dtune {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// An open-file-description lock (Linux >= 3.15): held by this open file, independent of the flock
// HDF5 takes on its own descriptor, and released by the kernel when the writer dies (kill -9
// included), so a .partial nobody holds is known to be stale.
bool try_lock(int fd) {
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  return fcntl(fd, F_OFD_SETLK, &l) == 0;
}

// Creates `partial` exclusively with its lock already held: a private file is created and locked
// first, then linked to the name (link() refuses a name that exists), so no other run ever sees the
// .partial unlocked (not even between an open(O_EXCL) and the lock). Returns the descriptor, or -1
// with errno (EEXIST when the name is taken).
int create_locked(const std::string& partial) {
  static int serial = 0;
  const std::string tmp =
      partial + ".tmp." + std::to_string(getpid()) + "." + std::to_string(serial++);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  if (!try_lock(fd) || link(tmp.c_str(), partial.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    close(fd);
    if (err != EPERM && err != ENOTSUP && err != EOPNOTSUPP) {
      errno = err;
      return -1;
    }
    // A file system without hard links (some FUSE mounts): create, then lock.
    fd = open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 && !try_lock(fd)) {
      close(fd);
      errno = EEXIST;
      return -1;
    }
    return fd;
  }
  unlink(tmp.c_str());
  return fd;
}

// Renames without replacing an existing `to` (false and errno EEXIST when it exists).
bool rename_no_replace(const std::string& from, const std::string& to) {
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  // File systems without RENAME_NOREPLACE: link() refuses an existing name just as well.
  if (link(from.c_str(), to.c_str()) != 0) return false;
  unlink(from.c_str());
  return true;
}

}  // namespace

std::string numbered_path(const std::string& path, int n) {
  const fs::path p(path);
  const std::string ext = p.extension().string();
  if (ext.empty()) return path + "." + std::to_string(n);
  return (p.parent_path() / (p.stem().string() + "." + std::to_string(n) + ext)).string();
}

ResultsFile ResultsFile::create(const std::string& path, const std::string& tool,
                                const std::string& flag, Existing existing) {
  if (path.empty()) throw UsageError(flag + ": empty path");
  ResultsFile f;
  f.existing_ = existing;
  f.requested_path_ = path;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec)
    throw UsageError(flag + " '" + path + "': cannot create directory '" + parent.string() + "' (" +
                     ec.message() + "); choose a writable location");
  if (fs::is_directory(path, ec))
    throw UsageError(flag + " '" + path + "' is a directory; give a file name such as " +
                     (fs::path(path) / "comm.h5").string());
  // Find a name whose .partial this process creates itself: never truncate a file another run
  // is writing (two runs with the same --output), nor one a dead run left (it holds results).
  constexpr int kMaxNumber = 9999;
  for (int n = 0; n <= kMaxNumber && f.lock_fd_ < 0; ++n) {
    const std::string candidate = n == 0 ? path : numbered_path(path, n);
    if (existing == Existing::kNewName && fs::exists(candidate, ec)) continue;
    const std::string partial = candidate + ".partial";
    int fd = create_locked(partial);
    if (fd < 0 && errno == EEXIST) {
      if (existing == Existing::kNewName) continue;
      // --overwrite: a stale .partial (nobody holds its lock) is replaced; a live one is not.
      fd = open(partial.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0 && !try_lock(fd)) {
        close(fd);
        throw UsageError(flag + " '" + path + "': another run is writing '" + partial +
                         "' now; wait for it or choose another " + flag);
      }
    }
    if (fd < 0)
      throw UsageError(flag + " '" + path + "': cannot write there (" + errno_text(errno) +
                       "); choose a writable location");
    f.lock_fd_ = fd;
    f.path_ = candidate;
    f.partial_path_ = partial;
  }
  if (f.lock_fd_ < 0)
    throw UsageError(flag + " '" + path + "': " + std::to_string(kMaxNumber) +
                     " numbered files exist beside it; clean up or choose another " + flag);
  if (f.path_ != path)
    std::printf(
        "# %s '%s' is taken (it, or its .partial, exists); writing '%s' instead "
        "(--overwrite replaces it)\n",
        flag.c_str(), path.c_str(), f.path_.c_str());
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
    : requested_path_(std::move(o.requested_path_)),
      path_(std::move(o.path_)),
      partial_path_(std::move(o.partial_path_)),
      file_(std::move(o.file_)),
      runs_group_(std::move(o.runs_group_)),
      lock_fd_(o.lock_fd_),
      existing_(o.existing_),
      runs_(o.runs_),
      finished_(o.finished_) {
  o.lock_fd_ = -1;
  o.finished_ = true;
}

ResultsFile& ResultsFile::operator=(ResultsFile&& o) noexcept {
  if (this != &o) {
    this->~ResultsFile();
    requested_path_ = std::move(o.requested_path_);
    path_ = std::move(o.path_);
    partial_path_ = std::move(o.partial_path_);
    file_ = std::move(o.file_);
    runs_group_ = std::move(o.runs_group_);
    lock_fd_ = o.lock_fd_;
    existing_ = o.existing_;
    runs_ = o.runs_;
    finished_ = o.finished_;
    o.lock_fd_ = -1;
    o.finished_ = true;
  }
  return *this;
}

ResultsFile::~ResultsFile() {
  if (!finished_) {
    try {
      finish("failed", 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtune: warning: could not finish results file %s: %s\n",
                   partial_path_.c_str(), e.what());
    }
  }
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
}

void ResultsFile::write_provenance(const Provenance& p) {
  dtune::write_provenance(file_.get(), p);
  flush();
}

h5::Handle ResultsFile::new_run(const std::string& description) {
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%04d-", runs_++);
  // '/' separates HDF5 path components: a description naming a path (--model hf:DIR/config.json)
  // would be a group in groups that do not exist. The attributes keep the name as given.
  std::string name = prefix + description;
  std::replace(name.begin(), name.end(), '/', '_');
  return h5::create_group(runs_group_.get(), name);
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
  // The lock is released only after the rename: until then the .partial is visibly in use.
  struct LockRelease {
    int& fd;
    ~LockRelease() {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  } release{lock_fd_};
  std::error_code ec;
  if (runs_ == 0 && status != "complete") {
    fs::remove(partial_path_, ec);
    return;
  }
  if (existing_ == Existing::kOverwrite) {
    fs::rename(partial_path_, path_, ec);
    if (ec)
      throw Error("cannot rename " + partial_path_ + " to " + path_ + ": " + ec.message() +
                  " (the results are in the .partial file)");
    return;
  }
  // Someone may have finished a file of this name since we started: take the next free number.
  const std::string wanted = path_;
  for (int n = 1; !rename_no_replace(partial_path_, path_); ++n) {
    if (errno != EEXIST || n > 9999)
      throw Error("cannot rename " + partial_path_ + " to " + path_ + ": " + errno_text(errno) +
                  " (the results are in the .partial file)");
    path_ = numbered_path(requested_path_, n);
  }
  if (path_ != wanted)
    std::printf("# '%s' appeared while this run wrote; the results are in '%s'\n", wanted.c_str(),
                path_.c_str());
}

std::optional<ResultsFile> create_results_on_root(const RunContext& ctx, const std::string& path,
                                                  const std::string& tool, const std::string& flag,
                                                  Existing existing) {
  std::optional<ResultsFile> file;
  std::string error;
  if (ctx.is_root()) {
    try {
      file.emplace(ResultsFile::create(path, tool, flag, existing));
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
