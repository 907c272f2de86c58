// A node-local cache tier between the loader and remote storage, as Alluxio puts one between
// training nodes and object storage: a Storage that serves reads from fixed-size blocks of the
// remote objects kept in a local directory (a disk, or /dev/shm for memory), fetching a block from
// the remote on a miss. Every rank of a node opens the same directory, so an entry is fetched
// once per node, not once per rank. Entries are written to a temporary name and renamed into
// place (readers never see a partial block); a striped lock file makes concurrent fillers of one
// block wait for the first instead of fetching it again. Capacity is kept by evicting the least
// recently used blocks (file mtime, touched on every hit). Hits, misses, bytes and evictions are
// counted per process. Torch-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "data/storage/storage.h"

namespace dtune::data {

struct CacheOptions {
  std::string dir;                     // created if missing
  int64_t capacity_bytes = 8LL << 30;  // all blocks together
  int64_t block_bytes = 8LL << 20;     // fetch unit (Alluxio's default block is 64 MiB)
};

struct CacheStats {
  int64_t hits = 0, misses = 0;           // block lookups
  int64_t hit_bytes = 0, miss_bytes = 0;  // payload served from the cache / fetched from the remote
  int64_t evictions = 0;
  int64_t waited = 0;  // misses that found the block filled by another rank meanwhile
};

class NodeCache final : public Storage {
 public:
  NodeCache(std::unique_ptr<Storage> remote, CacheOptions o);
  std::string describe() const override;
  std::string read(const std::string& key, int64_t offset = 0, int64_t length = -1) override;
  int64_t size(const std::string& key) override { return remote_->size(key); }
  std::vector<ObjectInfo> list() override { return remote_->list(); }
  std::vector<ObjectInfo> list_noting(std::vector<LeftOut>& left_out) override {
    return remote_->list_noting(left_out);
  }
  void write(const std::string& key, const std::string& bytes) override;  // through to the remote
  StorageStats stats() const override { return remote_->stats(); }        // the remote's traffic
  CacheStats cache_stats() const;

 private:
  // Appends bytes [start, start + n) of block `index` of `key` (n < 0: to the block's end) to
  // `out`, fetching the block on a miss; returns the block's size (shorter than a block: the last
  // one).
  int64_t block(const std::string& key, int64_t index, int64_t start, int64_t n, std::string& out);
  void evict_to_capacity(const std::string& keep);

  std::unique_ptr<Storage> remote_;
  CacheOptions o_;
  std::atomic<int64_t> hits_{0}, misses_{0}, hit_bytes_{0}, miss_bytes_{0}, evictions_{0},
      waited_{0};
};

}  // namespace dtune::data
