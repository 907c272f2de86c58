// The node-local block cache (see node_cache.h).
#include "data/cache/node_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/error.h"

namespace dtune::data {
namespace {

namespace fs = std::filesystem;
constexpr int kLockStripes = 64;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// An exclusive flock on a file that is never deleted (deleting lock files races with waiters).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cache lock " + path + ": " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) throw Error("cache lock " + path + ": " + std::strerror(errno));
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Appends bytes [start, start + n) of the file to `out` (n < 0: to its end) and returns the file's
// size, or -1 when it does not exist. A hit marks the entry most recently used.
int64_t read_range(const std::string& path, int64_t start, int64_t n, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    throw Error("cache entry " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  ::fstat(fd, &st);
  const int64_t size = static_cast<int64_t>(st.st_size);
  const int64_t end = n < 0 ? size : std::min(size, start + n);
  const size_t base = out.size();
  if (end > start) out.resize(base + static_cast<size_t>(end - start));
  int64_t got = 0;
  while (start + got < end) {
    const ssize_t r = ::pread(fd, out.data() + base + got, static_cast<size_t>(end - start - got),
                              static_cast<off_t>(start + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      throw Error("cache entry " + path + ": read failed");
    }
    got += r;
  }
  ::futimens(fd, nullptr);
  ::close(fd);
  return size;
}

void write_file_atomically(const std::string& path, const std::string& data) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%d.%zu", static_cast<int>(::getpid()),
                std::hash<std::thread::id>{}(std::this_thread::get_id()));
  const std::string tmp = path + suffix;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cache " + tmp + ": " + std::strerror(errno));
  size_t put = 0;
  while (put < data.size()) {
    const ssize_t n = ::write(fd, data.data() + put, data.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cache " + tmp + ": write failed (" + std::strerror(errno) +
                  "): is the cache disk full?");
    }
    put += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error("cache " + path + ": rename failed (" + std::strerror(errno) + ")");
  }
}

}  // namespace

NodeCache::NodeCache(std::unique_ptr<Storage> remote, CacheOptions o)
    : remote_(std::move(remote)), o_(std::move(o)) {
  if (o_.block_bytes < 4096) throw UsageError("cache block size must be at least 4 KiB");
  if (o_.capacity_bytes < o_.block_bytes)
    throw UsageError("cache capacity (" + std::to_string(o_.capacity_bytes >> 20) +
                     " MiB) is smaller than one block (" + std::to_string(o_.block_bytes >> 20) +
                     " MiB)");
  std::error_code ec;
  fs::create_directories(fs::path(o_.dir) / "blocks", ec);
  if (!ec) fs::create_directories(fs::path(o_.dir) / "locks", ec);
  if (ec)
    throw UsageError("cache directory " + o_.dir + ": cannot create it (" + ec.message() + ")");
}

std::string NodeCache::describe() const {
  return remote_->describe() + " via node cache " + o_.dir + " (" +
         std::to_string(o_.capacity_bytes >> 20) + " MiB, " + std::to_string(o_.block_bytes >> 20) +
         " MiB blocks)";
}

void NodeCache::write(const std::string& key, const std::string& bytes) {
  remote_->write(key, bytes);
}

CacheStats NodeCache::cache_stats() const {
  return {hits_.load(),       misses_.load(),    hit_bytes_.load(),
          miss_bytes_.load(), evictions_.load(), waited_.load()};
}

int64_t NodeCache::block(const std::string& key, int64_t index, int64_t start, int64_t n,
                         std::string& out) {
  // Blocks of different remotes never share a name: the remote's description is in the hash.
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%lld",
                static_cast<unsigned long long>(fnv1a(remote_->describe() + "\n" + key)),
                static_cast<long long>(index));
  const std::string path = (fs::path(o_.dir) / "blocks" / name).string();
  const size_t before = out.size();
  int64_t size = read_range(path, start, n, out);
  if (size >= 0) {
    ++hits_;
    hit_bytes_ += static_cast<int64_t>(out.size() - before);
    return size;
  }
  std::string data;
  {
    FileLock held(
        (fs::path(o_.dir) / "locks" / std::to_string(fnv1a(name) % kLockStripes)).string());
    size = read_range(path, start, n, out);
    if (size >= 0) {  // another rank or thread filled it while this one waited for the lock
      ++hits_;
      ++waited_;
      hit_bytes_ += static_cast<int64_t>(out.size() - before);
      return size;
    }
    data = remote_->read(key, index * o_.block_bytes, o_.block_bytes);
    write_file_atomically(path, data);
  }
  ++misses_;
  miss_bytes_ += static_cast<int64_t>(data.size());
  const int64_t end = n < 0 ? static_cast<int64_t>(data.size())
                            : std::min<int64_t>(static_cast<int64_t>(data.size()), start + n);
  if (end > start) out.append(data, static_cast<size_t>(start), static_cast<size_t>(end - start));
  evict_to_capacity(path);
  return static_cast<int64_t>(data.size());
}

void NodeCache::evict_to_capacity(const std::string& keep) {
  FileLock held((fs::path(o_.dir) / "locks" / "evict").string());
  struct Entry {
    std::string path;
    int64_t bytes;
    struct timespec mtime;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(fs::path(o_.dir) / "blocks")) {
    const std::string p = e.path().string();
    if (p.find(".tmp.") != std::string::npos) continue;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;  // evicted meanwhile
    entries.push_back({p, static_cast<int64_t>(st.st_size), st.st_mtim});
    total += static_cast<int64_t>(st.st_size);
  }
  if (total <= o_.capacity_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec
                                            : a.mtime.tv_nsec < b.mtime.tv_nsec;
  });
  for (const auto& e : entries) {
    if (total <= o_.capacity_bytes) break;
    if (e.path == keep) continue;
    if (::unlink(e.path.c_str()) == 0) {  // a reader holding it open keeps its copy
      total -= e.bytes;
      ++evictions_;
    }
  }
}

std::string NodeCache::read(const std::string& key, int64_t offset, int64_t length) {
  std::string out;
  const int64_t bs = o_.block_bytes;
  for (int64_t idx = offset / bs;; ++idx) {
    const int64_t start = std::max<int64_t>(0, offset - idx * bs);
    const int64_t want =
        length < 0 ? -1 : std::min<int64_t>(bs - start, length - static_cast<int64_t>(out.size()));
    const int64_t size = block(key, idx, start, want, out);
    const bool done = length >= 0 && static_cast<int64_t>(out.size()) >= length;
    if (done || size < bs) return out;  // enough, or the object ended in this block
  }
}

}  // namespace dtune::data
