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
    requests_.fetch_add(1, std::memory_order_relaxed);
    std::vector<ObjectInfo> out;
    std::error_code ec;
    fs::recursive_directory_iterator it(root_, fs::directory_options::none, ec), end;
    if (ec) throw Error("local storage: cannot list '" + root_.string() + "': " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) throw Error("local storage: cannot list '" + root_.string() + "': " + ec.message());
      std::error_code fec;
      if (!it->is_regular_file(fec)) continue;  // directories, sockets, dangling links
      if (it->path().filename().string().find(kTmpMarker) != std::string::npos) continue;
      const int64_t sz = static_cast<int64_t>(it->file_size(fec));
      if (fec) continue;  // removed while listing
      out.push_back({it->path().lexically_relative(root_).generic_string(), sz});
    }
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
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
