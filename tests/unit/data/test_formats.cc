// The data pipeline's formats and bookkeeping, without torch: tar shards written and read back
// (also truncated and damaged), WebDataset grouping, llm.c token shards, the dataset.json manifest,
// the epoch order (a shuffled permutation, deterministic, different per epoch and seed,
// shard-local) and per-rank slices (a partition), and the node cache over a local "remote" (hits,
// LRU eviction within capacity, concurrent fillers fetching a block once).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "data/cache/node_cache.h"
#include "data/formats/dataset.h"
#include "data/formats/tar.h"
#include "data/formats/token_shard.h"
#include "data/loader/sampler.h"

namespace dtune::data {
namespace {

namespace fs = std::filesystem;

std::string blob(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

TEST(Tar, WriteThenScanGivesMembersAtTheirOffsets) {
  TarWriter w;
  w.add("a/000001.jpg", blob(1000, 1));
  w.add("a/000001.cls", "3");
  w.add("a/000002.jpg", blob(512, 2));
  w.add("a/000002.cls", "0");
  const std::string tar = w.finish();
  EXPECT_EQ(tar.size() % 512, 0u);
  bool truncated = true;
  const auto m = scan_tar(tar, &truncated);
  EXPECT_FALSE(truncated);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].name, "a/000001.jpg");
  EXPECT_EQ(tar.substr(static_cast<size_t>(m[0].offset), 1000), blob(1000, 1));
  EXPECT_EQ(tar.substr(static_cast<size_t>(m[3].offset), 1), "0");
  const auto samples = group_webdataset(m);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].key, "a/000002");
  EXPECT_EQ(samples[1].fields.at("jpg").size, 512);
  EXPECT_EQ(samples[0].fields.count("cls"), 1u);
}

TEST(Tar, TruncatedOrDamagedShardKeepsTheMembersBeforeTheDamage) {
  TarWriter w;
  w.add("x.jpg", blob(3000, 1));
  w.add("y.jpg", blob(3000, 2));
  const std::string tar = w.finish();
  bool truncated = false;
  EXPECT_EQ(scan_tar(tar.substr(0, 512 + 3072 + 512 + 100), &truncated).size(),
            1u);  // cut inside y's data
  EXPECT_TRUE(truncated);
  std::string bad = tar;
  bad[512 + 3072 + 10] ^= 0x5a;  // y's header: checksum no longer matches
  EXPECT_EQ(scan_tar(bad, &truncated).size(), 1u);
  EXPECT_TRUE(truncated);
  EXPECT_TRUE(scan_tar("", &truncated).empty());
}

TEST(TokenShard, HeaderFollowsLlmC) {
  const std::string s = encode_token_shard({1, 2, 65535});
  EXPECT_EQ(s.size(), 1024u + 6);
  EXPECT_EQ(token_shard_count(s, "t"), 3);
  std::string wrong = s;
  wrong[0] = 0;
  EXPECT_THROW(token_shard_count(wrong, "t"), Error);
  EXPECT_EQ(byte_tokens("AZ"), (std::vector<uint16_t>{65, 90}));
}

TEST(Manifest, RoundTripAndTokenWindows) {
  Dataset d;
  d.format = "tokens";
  d.kind = DatasetKind::kTokens;
  d.objects = {{"t0.bin", 1024 + 2 * 100}, {"t1.bin", 1024 + 2 * 10}};
  d.tokens = 110;
  d.vocab = 256;
  const Dataset back = manifest_from_json(manifest_to_json(d), "m");
  EXPECT_EQ(back.objects.size(), 2u);
  EXPECT_EQ(back.objects[1].size_bytes, 1044);
  EXPECT_EQ(back.kind, DatasetKind::kTokens);
  // Context 16: windows of 17 tokens every 16 -> 100 tokens give 6 (starts 0..80), 10 give none.
  const auto w = token_windows(back, 16);
  ASSERT_EQ(w.size(), 6u);
  EXPECT_EQ(w[5].offset, 1024 + 80 * 2);
  EXPECT_EQ(w[5].size, 34);
  EXPECT_THROW(manifest_from_json("{}", "m"), Error);
  EXPECT_THROW(manifest_from_json("nope", "m"), Error);
}

std::vector<SampleRef> samples_in(int objects, int per_object) {
  std::vector<SampleRef> s;
  for (int o = 0; o < objects; ++o)
    for (int i = 0; i < per_object; ++i) s.push_back({static_cast<uint32_t>(o), i, 1, 0});
  return s;
}

TEST(Sampler, EpochOrderIsAPermutationDeterministicAndShardLocal) {
  const auto s = samples_in(5, 7);
  const auto a = epoch_order(s, 5, 42, 0);
  EXPECT_EQ(a, epoch_order(s, 5, 42, 0));
  EXPECT_NE(a, epoch_order(s, 5, 42, 1));
  EXPECT_NE(a, epoch_order(s, 5, 43, 0));
  // Every sample exactly once, and shuffled: not the stored order.
  std::vector<int64_t> sorted = a, stored(s.size());
  std::sort(sorted.begin(), sorted.end());
  std::iota(stored.begin(), stored.end(), 0);
  EXPECT_EQ(sorted, stored);
  EXPECT_NE(a, stored);
  // Shard-then-sample: each shard's samples are consecutive.
  for (size_t i = 0; i < a.size(); i += 7)
    for (size_t j = i; j < i + 7; ++j)
      EXPECT_EQ(s[static_cast<size_t>(a[j])].object, s[static_cast<size_t>(a[i])].object);
}

TEST(Sampler, RankSlicesPartitionTheEpoch) {
  const auto order = epoch_order(samples_in(3, 11), 3, 1, 0);  // 33 samples
  for (int world : {1, 2, 4, 5}) {
    std::vector<int64_t> all;
    size_t smallest = order.size(), largest = 0;
    for (int r = 0; r < world; ++r) {
      const auto mine = rank_slice(order, r, world);
      smallest = std::min(smallest, mine.size());
      largest = std::max(largest, mine.size());
      all.insert(all.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(all, order) << world;  // disjoint, complete, in order
    EXPECT_LE(largest - smallest, 1u);
  }
}

class Cache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dtune_cache_test_" + std::to_string(::getpid()));
    fs::create_directories(root_ / "remote");
    auto remote = open_local_storage((root_ / "remote").string());
    for (int i = 0; i < 4; ++i)
      remote->write("obj" + std::to_string(i), blob(10000, static_cast<char>(i)));
  }
  void TearDown() override { fs::remove_all(root_); }
  std::unique_ptr<NodeCache> cache(int64_t capacity) {
    return std::make_unique<NodeCache>(open_local_storage((root_ / "remote").string()),
                                       CacheOptions{(root_ / "cache").string(), capacity, 4096});
  }
  int64_t cached_bytes() {
    int64_t n = 0;
    for (const auto& e : fs::directory_iterator(root_ / "cache" / "blocks"))
      n += static_cast<int64_t>(e.file_size());
    return n;
  }
  fs::path root_;
};

TEST_F(Cache, ServesExactBytesAndHitsTheSecondTime) {
  auto c = cache(1 << 20);
  EXPECT_EQ(c->read("obj1", 3000, 3000),
            blob(10000, 1).substr(3000, 3000));  // blocks 0 and 1 of 4 KiB
  EXPECT_EQ(c->cache_stats().misses, 2);
  EXPECT_EQ(c->read("obj1", 4200, 100), blob(10000, 1).substr(4200, 100));
  EXPECT_EQ(c->cache_stats().hits, 1);
  EXPECT_EQ(c->read("obj1"), blob(10000, 1));  // whole object; the last block is short
  EXPECT_EQ(c->read("obj1", 9990, 100), blob(10000, 1).substr(9990));  // short read at the end
  EXPECT_THROW(c->read("missing", 0, 10), NotFound);
  // A second process opening the same directory finds the blocks.
  auto other = cache(1 << 20);
  EXPECT_EQ(other->read("obj1", 0, 10000), blob(10000, 1));
  EXPECT_EQ(other->cache_stats().misses, 0);
}

TEST_F(Cache, EvictsLeastRecentlyUsedWithinCapacity) {
  auto c = cache(3 * 4096);
  for (int i = 0; i < 4; ++i) c->read("obj" + std::to_string(i), 0, 100);  // four first blocks
  EXPECT_LE(cached_bytes(), 3 * 4096);
  EXPECT_EQ(c->cache_stats().evictions, 1);
  EXPECT_EQ(c->read("obj3", 0, 100), blob(10000, 3).substr(0, 100));  // the newest stayed
  EXPECT_EQ(c->cache_stats().misses, 4);
  c->read("obj0", 0, 100);  // the oldest was evicted: a miss again
  EXPECT_EQ(c->cache_stats().misses, 5);
  EXPECT_LE(cached_bytes(), 3 * 4096);
}

TEST_F(Cache, ConcurrentFillersFetchABlockOnceAndNeverSeeItPartial) {
  auto remote = open_local_storage((root_ / "remote").string());
  auto* counted = remote.get();
  NodeCache c(std::move(remote), CacheOptions{(root_ / "cache").string(), 1 << 20, 4096});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k)
        if (c.read("obj2", 0, 10000) != blob(10000, 2)) ++wrong;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(c.cache_stats().misses, 3);  // three blocks, each fetched once
  EXPECT_EQ(counted->stats().requests, 3);
}

}  // namespace
}  // namespace dtune::data
