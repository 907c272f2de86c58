// The loader benchmark (see bench_loader.h).
#include "benchmarks/data/bench_loader.h"

#include <chrono>
#include <cstdio>
#include <fstream>

#include "benchmarks/data/memory_fit.h"
#include "core/deadline.h"
#include "core/error.h"
#include "core/gather.h"
#include "data/loader/open_data.h"

namespace dtune::data {

int bench_loader(const RunContext& ctx, Watchdog& watchdog, const BenchOptions& o) {
  OpenedData data = open_data(o.url, o.cache, o.url);
  if (data.indexed && ctx.is_root())
    std::printf("# %s has no dataset.json: indexed it now (dtune-data index saves it)\n",
                o.url.c_str());
  const std::shared_ptr<Storage>& storage = data.storage;
  const Dataset& d = data.dataset;
  NodeCache* cache = data.cache;
  LoaderOptions lo = o.loader;
  lo.rank = o.same_slice ? 0 : ctx.rank();
  lo.world = o.same_slice ? 1 : ctx.world_size();
  // A batch: (B, 3, S, S) float images or (B, T) + (B, T) int64 tokens. Up to prefetch of them wait
  // built, each worker builds one, and next() may copy one more together (see loader.h).
  const bool images = d.kind == DatasetKind::kImages;
  const double batch_bytes =
      static_cast<double>(lo.batch) *
      (images ? 3.0 * lo.image_size * lo.image_size * 4 + 8 : 2.0 * lo.context * 8);
  require_memory(batch_bytes * (lo.prefetch + lo.workers + 2),
                 "bench: --batch " + std::to_string(lo.batch) +
                     (images ? " --image-size " + std::to_string(lo.image_size)
                             : " --context " + std::to_string(lo.context)) +
                     " --prefetch " + std::to_string(lo.prefetch) + " --workers " +
                     std::to_string(lo.workers),
                 "lower them");
  Loader loader(storage, d, lo);
  if (ctx.is_root()) {
    std::printf("# dtune-data bench: %s (%s)\n", storage->describe().c_str(), d.describe().c_str());
    std::printf(
        "# %d ranks x batch %lld, %d workers, prefetch %d, %s\n", ctx.world_size(),
        static_cast<long long>(lo.batch), lo.workers, lo.prefetch,
        d.kind == DatasetKind::kImages
            ? ("images " + std::to_string(lo.image_size) + "x" + std::to_string(lo.image_size) +
               (lo.augment ? " random-resized-crop + flip" : " center crop"))
                  .c_str()
            : ("token windows of " + std::to_string(lo.context)).c_str());
    std::printf("# %-6s %8s %10s %12s %10s %10s %10s %6s %8s %10s %11s %9s\n", "epoch", "batches",
                "samples", "samples/s", "fetch_ms", "decode_ms", "wait_ms", "bad", "hit%",
                "fetched_MB", "undecodable", "truncated");
  }
  std::ofstream ids;
  if (!o.dump_ids.empty()) {
    ids.open(o.dump_ids + ".rank" + std::to_string(ctx.rank()));
    if (!ids)
      throw UsageError("--dump-ids " + o.dump_ids + ": cannot write " + o.dump_ids + ".rank" +
                       std::to_string(ctx.rank()));
  }
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const LoaderTotals before = loader.totals();
    const CacheStats cache_before = cache ? cache->cache_stats() : CacheStats{};
    {
      const DeadlineGuard guard(watchdog, o.timeout_s,
                                "the ranks' start of epoch " + std::to_string(epoch));
      DTUNE_MPI_CHECK(MPI_Barrier(ctx.comm()));
    }
    const auto t0 = std::chrono::steady_clock::now();
    loader.start_epoch(epoch);
    int64_t n = 0;
    while (auto b = loader.next()) {
      for (int64_t id : b->ids) ids << epoch << ' ' << id << '\n';
      if (o.max_batches > 0 && ++n >= o.max_batches) break;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const LoaderTotals t = loader.totals();
    std::vector<double> mine = {static_cast<double>(t.batches - before.batches),
                                static_cast<double>(t.samples - before.samples),
                                s,
                                t.fetch_ms - before.fetch_ms,
                                t.decode_ms - before.decode_ms,
                                t.wait_ms - before.wait_ms,
                                static_cast<double>(t.bad - before.bad)};
    const double undecodable = static_cast<double>(t.undecodable - before.undecodable);
    const double truncated = static_cast<double>(t.truncated - before.truncated);
    const CacheStats c = cache ? cache->cache_stats() : CacheStats{};
    mine.push_back(static_cast<double>(c.hits - cache_before.hits));
    mine.push_back(static_cast<double>(c.misses - cache_before.misses));
    mine.push_back(static_cast<double>(c.miss_bytes - cache_before.miss_bytes));
    mine.push_back(undecodable);
    mine.push_back(truncated);
    constexpr int kF = 12;
    std::vector<double> all;
    {
      const DeadlineGuard guard(watchdog, o.timeout_s,
                                "gathering epoch " + std::to_string(epoch) + "'s totals");
      all = gather_doubles(ctx.comm(), mine);
    }
    if (ctx.is_root()) {
      double sum[kF] = {}, slowest = 0;
      for (int r = 0; r < ctx.world_size(); ++r) {
        for (int k = 0; k < kF; ++k) sum[k] += all[static_cast<size_t>(r * kF + k)];
        slowest = std::max(slowest, all[static_cast<size_t>(r * kF + 2)]);
      }
      const double lookups = sum[7] + sum[8];
      std::printf("  %-6d %8.0f %10.0f %12.1f %10.1f %10.1f %10.1f %6.0f %8s %10.2f %11.0f %9.0f\n",
                  epoch, sum[0], sum[1], sum[1] / slowest, sum[3], sum[4], sum[5], sum[6],
                  cache
                      ? (std::to_string(100 * sum[7] / std::max(1.0, lookups)).substr(0, 6)).c_str()
                      : "-",
                  cache ? sum[9] / 1e6 : 0.0, sum[10], sum[11]);
    }
  }
  if (ctx.is_root()) {
    const StorageStats st = storage->stats();
    std::printf("# rank 0 storage: %lld requests, %.1f MB, %lld retries\n",
                static_cast<long long>(st.requests), st.bytes / 1e6,
                static_cast<long long>(st.retries));
  }
  return 0;
}

}  // namespace dtune::data
