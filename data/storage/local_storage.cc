// The local backend: a directory on any POSIX file system (local disk, NFS, Lustre, a FUSE
// mount). Reads are pread() on a descriptor opened per call, so concurrent read() calls from the
// loader's threads share no state but the atomic counters. Writes go to a temporary file in the
// same directory and are renamed into place, so a reader sees the old object or the new one,
// never half of one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "data/storage/storage.h"

namespace dtune::data {
namespace detail {
void check_key(const std::string& key);  // storage.cc
}  // namespace detail

namespace {

namespace fs = std::filesystem;

// Temporary files of writes in progress carry this marker; list() skips them.
constexpr const char* kTmpMarker = ".dtune-tmp.";

std::string errno_text(int err) { return std::strerror(err); }

// Closes a descriptor on every path out of a scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

class LocalStorage final : public Storage {
 public:
  explicit LocalStorage(fs::path root) : root_(std::move(root)) {}

  std::string describe() const override { return "file:" + root_.string(); }

  std::string read(const std::string& key, int64_t offset, int64_t length) override {
    if (offset < 0)
      throw UsageError("read of '" + key + "': negative offset " + std::to_string(offset));
    const std::string path = path_of(key);
    requests_.fetch_add(1, std::memory_order_relaxed);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) fail("open", key, path, errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail("fstat", key, path, errno);
    if (!S_ISREG(st.st_mode)) throw NotFound("local storage: '" + path + "' is not a regular file");
    const int64_t size = st.st_size;
    // A short object gives a short read; past the end gives nothing.
    const int64_t avail = std::max<int64_t>(0, size - offset);
    const int64_t want = length < 0 ? avail : std::min(length, avail);
    std::string out(static_cast<size_t>(want), '\0');
    int64_t done = 0;
    while (done < want) {
      const ssize_t n = ::pread(fd.get(), out.data() + done, static_cast<size_t>(want - done),
                                static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("pread", key, path, errno);
      }
      if (n == 0) break;  // the file shrank under us: a short read, as documented
      done += n;
    }
    out.resize(static_cast<size_t>(done));
    bytes_.fetch_add(done, std::memory_order_relaxed);
    return out;
  }

  int64_t size(const std::string& key) override {
    const std::string path = path_of(key);
    requests_.fetch_add(1, std::memory_order_relaxed);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("stat", key, path, errno);
    if (!S_ISREG(st.st_mode)) throw NotFound("local storage: '" + path + "' is not a regular file");
    return st.st_size;
  }

  std::vector<ObjectInfo> list() override {
    std::vector<LeftOut> ignored;
    return list_noting(ignored);
  }

  std::vector<ObjectInfo> list_noting(std::vector<LeftOut>& left_out) override {
    requests_.fetch_add(1, std::memory_order_relaxed);
    left_out.clear();
    std::error_code ec;
    fs::directory_iterator probe(root_, ec);
    if (ec) throw Error("local storage: cannot list '" + root_.string() + "': " + ec.message());
    Walk w{root_, {}, {}, left_out, {}};
    walk(w, root_);
    // Files first, then the links in key order: a file reached twice is listed once.
    std::sort(w.links.begin(), w.links.end(),
              [](const Link& a, const Link& b) { return a.info.key < b.info.key; });
    for (const Link& l : w.links) {
      const auto [it, fresh] = w.seen.emplace(l.id, l.info.key);
      if (fresh)
        w.out.push_back(l.info);
      else
        left_out.push_back({l.info.key, "duplicate: a symlink to " + it->second +
                                            ", listed already (a file is read once)"});
    }
    std::sort(w.out.begin(), w.out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    std::sort(left_out.begin(), left_out.end(),
              [](const LeftOut& a, const LeftOut& b) { return a.key < b.key; });
    return std::move(w.out);
  }

  void write(const std::string& key, const std::string& bytes) override {
    const std::string path = path_of(key);
    requests_.fetch_add(1, std::memory_order_relaxed);
    const fs::path target(path);
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec)
      throw Error("local storage: cannot create directory '" + target.parent_path().string() +
                  "' for '" + key + "': " + ec.message());
    // Unique per process and call, so concurrent writers of one key do not share a temp file.
    static std::atomic<uint64_t> counter{0};
    std::string name(".");
    name.append(target.filename().string()).append(kTmpMarker);
    name.append(std::to_string(::getpid()))
        .append(".")
        .append(std::to_string(counter.fetch_add(1)));
    const std::string tmp = (target.parent_path() / name).string();
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) fail("create", key, tmp, errno);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::unlink(tmp.c_str());
        fail("write", key, tmp, err);
      }
      done += static_cast<size_t>(n);
    }
    // No fsync: rename() already makes the swap atomic for readers; durability across a power
    // loss is not what dataset generation needs, and fsync per shard is slow on NFS/Lustre.
    if (::close(fd.release()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      fail("close", key, tmp, err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      fail("rename", key, path, err);
    }
  }

  StorageStats stats() const override {
    StorageStats s;
    s.requests = requests_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.retries = 0;  // a local file system call is not retried
    return s;
  }

 private:
  using FileId = std::pair<dev_t, ino_t>;
  struct Link {
    ObjectInfo info;
    FileId id;
  };
  struct Walk {
    const fs::path& root;
    std::vector<ObjectInfo> out;
    std::vector<Link> links;
    std::vector<LeftOut>& left_out;
    std::map<FileId, std::string> seen;  // every file listed, by identity -> its key
  };

  // One folder, recursively; a folder that cannot be read (or stops being readable half-way) is
  // named and the walk goes on with the rest: a listing error no longer hides the files after it.
  static void walk(Walk& w, const fs::path& dir) {
    auto key_of = [&](const fs::path& p) { return p.lexically_relative(w.root).generic_string(); };
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    if (ec) {
      w.left_out.push_back({key_of(dir) + "/", "unreadable folder: " + ec.message()});
      return;
    }
    for (; it != end; it.increment(ec)) {
      const fs::path p = it->path();
      if (p.filename().string().find(kTmpMarker) != std::string::npos) continue;
      const std::string key = key_of(p);
      struct stat ls {};
      if (::lstat(p.c_str(), &ls) != 0) continue;  // removed while listing
      if (S_ISDIR(ls.st_mode)) {
        walk(w, p);
      } else if (S_ISREG(ls.st_mode)) {
        w.out.push_back({key, static_cast<int64_t>(ls.st_size)});
        w.seen.emplace(FileId{ls.st_dev, ls.st_ino}, key);
      } else if (S_ISLNK(ls.st_mode)) {
        note_link(w, p, key);
      } else {
        w.left_out.push_back({key, "not a regular file (a FIFO, socket or device)"});
      }
    }
    if (ec) w.left_out.push_back({key_of(dir) + "/", "listing stopped: " + ec.message()});
  }

  static void note_link(Walk& w, const fs::path& p, const std::string& key) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(p, ec);
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      const int err = errno;
      w.left_out.push_back({key, err == ELOOP    ? "symlink loop"
                                 : err == ENOENT ? "dangling symlink (to " + target.string() + ")"
                                                 : "unreadable symlink: " + errno_text(err)});
    } else if (S_ISDIR(st.st_mode)) {
      w.left_out.push_back({key, "symlink to a folder (not followed)"});
    } else if (!S_ISREG(st.st_mode)) {
      w.left_out.push_back({key, "symlink to something that is not a regular file"});
    } else {
      w.links.push_back({{key, static_cast<int64_t>(st.st_size)}, FileId{st.st_dev, st.st_ino}});
    }
  }

  std::string path_of(const std::string& key) const {
    detail::check_key(key);
    return (root_ / key).string();
  }

  [[noreturn]] static void fail(const char* what, const std::string& key, const std::string& path,
                                int err) {
    if (err == ENOENT || err == ENOTDIR)
      throw NotFound("local storage: no such key '" + key + "' (" + path + " does not exist)");
    throw Error("local storage: " + std::string(what) + " of '" + key + "' (" + path +
                ") failed: " + errno_text(err));
  }

  fs::path root_;
  std::atomic<int64_t> requests_{0}, bytes_{0};
};

}  // namespace

std::unique_ptr<Storage> open_local_storage(const std::string& dir) {
  if (dir.empty()) throw UsageError("local storage: the directory path is empty");
  std::error_code ec;
  const fs::path root = fs::absolute(fs::path(dir), ec).lexically_normal();
  if (ec) throw UsageError("local storage: bad directory path '" + dir + "': " + ec.message());
  const fs::file_status st = fs::status(root, ec);
  if (!fs::exists(st)) throw NotFound("local storage root '" + root.string() + "' does not exist");
  if (!fs::is_directory(st))
    throw UsageError("local storage root '" + root.string() + "' is not a directory");
  fs::path clean = root;
  if (!clean.has_filename() && clean != clean.root_path()) clean = clean.parent_path();  // "dir/"
  return std::make_unique<LocalStorage>(clean);
}

}  // namespace dtune::data
