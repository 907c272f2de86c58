// The loader benchmark (see bench_loader.h).
#include "benchmarks/data/bench_loader.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>

#include "benchmarks/data/data_results.h"
#include "benchmarks/data/memory_fit.h"
#include "core/deadline.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/provenance.h"
#include "data/loader/open_data.h"

namespace dtune::data {
namespace {

// Every rank decides alike (the same dataset and flags), so a refusal is exit 2 on every rank.
void refuse_tokens_without_context(const Dataset& d, const LoaderOptions& lo,
                                   const std::string& url) {
  if (d.kind == DatasetKind::kTokens && lo.context < 1)
    throw UsageError("bench: " + url +
                     " holds tokens: give --context T, the tokens per sample (the model's context "
                     "length, e.g. 1024 for GPT-2)");
}

void refuse_empty_epochs(const Dataset& d, const LoaderOptions& lo, int world,
                         const std::string& url) {
  const int64_t n = d.kind == DatasetKind::kTokens
                        ? static_cast<int64_t>(token_windows(d, lo.context).size())
                        : static_cast<int64_t>(d.samples.size());
  const int64_t slice = smallest_slice(n, world);
  const std::string what = d.kind == DatasetKind::kTokens
                               ? "windows of --context " + std::to_string(lo.context)
                               : "samples";
  if (slice == 0)
    throw UsageError("bench: " + url + " has " + std::to_string(n) + " " + what + " for " +
                     std::to_string(world) + " ranks: a rank would get none; use fewer ranks" +
                     (d.kind == DatasetKind::kTokens ? " or a shorter --context" : ""));
  if (lo.drop_last && slice < lo.batch)
    throw UsageError("bench: " + url + " has " + std::to_string(n) + " " + what + ", " +
                     std::to_string(slice) + " per rank with " + std::to_string(world) +
                     " ranks: fewer than --batch " + std::to_string(lo.batch) +
                     ", so an epoch would yield no batch; give --batch " + std::to_string(slice) +
                     " or less (or --keep-last to deliver the partial batch)");
}

std::vector<double> epoch_numbers(const LoaderTotals& t, const LoaderTotals& t0, double seconds,
                                  const CacheStats& c, const CacheStats& c0, const StorageStats& s,
                                  const StorageStats& s0) {
  auto d = [](auto a, auto b) { return static_cast<double>(a - b); };
  return {d(t.batches, t0.batches),
          d(t.samples, t0.samples),
          seconds,
          t.fetch_ms - t0.fetch_ms,
          t.decode_ms - t0.decode_ms,
          t.wait_ms - t0.wait_ms,
          d(t.bad, t0.bad),
          d(t.undecodable, t0.undecodable),
          d(t.truncated, t0.truncated),
          d(c.hits, c0.hits),
          d(c.misses, c0.misses),
          d(c.hit_bytes, c0.hit_bytes),
          d(c.miss_bytes, c0.miss_bytes),
          d(c.evictions, c0.evictions),
          d(s.bytes, s0.bytes),
          d(s.requests, s0.requests),
          d(s.retries, s0.retries),
          t.jpeg_ms - t0.jpeg_ms,
          d(t.coef_bytes, t0.coef_bytes)};
}

// One line per bad sample this rank named this epoch: "rank R: NAME: WHY".
std::string named_bad_lines(const Loader& loader, int rank) {
  std::string out;
  for (const auto& b : loader.named_bad())
    out += "rank " + std::to_string(rank) + ": " + b.name + ": " + b.why + "\n";
  return out;
}

// Root: the epoch's bad samples, the first kNamedBadSamples by name (rank by rank), then a count.
void print_named_bad(const std::vector<std::string>& per_rank, int64_t bad) {
  if (bad == 0) return;
  std::printf("#   %lld bad sample%s skipped:\n", static_cast<long long>(bad), bad > 1 ? "s" : "");
  size_t shown = 0;
  for (const auto& lines : per_rank) {
    size_t at = 0;
    for (size_t end; shown < kNamedBadSamples && (end = lines.find('\n', at)) != std::string::npos;
         at = end + 1, ++shown)
      std::printf("#     %s\n", lines.substr(at, end - at).c_str());
  }
  if (static_cast<int64_t>(shown) < bad)
    std::printf("#     ... and %lld more\n",
                static_cast<long long>(bad - static_cast<int64_t>(shown)));
}

// Test hook (--dump-digests): "epoch id label digest" per delivered image or window, the digest
// FNV-1a 64 of the sample's tensor bytes ((3, S, S) float or (T,) int64), so that a test can
// compare what two datasets delivered without the tensors.
void write_digests(std::ofstream& out, int epoch, const LoadedBatch& b) {
  const torch::Tensor x = b.input.contiguous();
  const int64_t n = x.size(0), row = x.numel() / std::max<int64_t>(n, 1) * x.element_size();
  const auto* bytes = static_cast<const unsigned char*>(x.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a 64 offset basis
    for (int64_t k = 0; k < row; ++k) h = (h ^ bytes[i * row + k]) * 1099511628211ull;
    const int64_t label = b.target.dim() == 1 ? b.target[i].item<int64_t>() : -1;
    out << epoch << ' ' << b.ids[static_cast<size_t>(i)] << ' ' << label << ' ' << std::hex << h
        << std::dec << '\n';
  }
}

}  // namespace

int64_t smallest_slice(int64_t samples, int world) {
  // rank_slice: rank r takes [r*M/N, (r+1)*M/N); rank 0's, floor(M/N), is the smallest.
  return world > 0 ? samples / world : 0;
}

int bench_loader(const RunContext& ctx, Watchdog& watchdog, const BenchOptions& o) {
  std::optional<ResultsFile> file;
  std::optional<DeadlineGuard> setup_guard;  // the set-up's collectives run armed
  setup_guard.emplace(watchdog, o.timeout_s, "setting up (the results file, every rank's host)");
  if (!o.output.empty())
    file = create_results_on_root(ctx, o.output, "dtune-data", "--output",
                                  o.overwrite ? Existing::kOverwrite : Existing::kNewName);
  // Collective (the ranks' hosts are gathered): every rank takes part, rank 0 writes it.
  const Provenance prov = collect_provenance(ctx, o.command_line, "cpu", "");
  setup_guard.reset();
  if (file) file->write_provenance(prov);
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
  refuse_tokens_without_context(d, lo, o.url);
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
  refuse_empty_epochs(d, lo, lo.world, o.url);  // after the memory check, which names more flags
  Loader loader(storage, d, lo);
  if (ctx.is_root()) {
    std::printf("# dtune-data bench: %s (%s)\n", storage->describe().c_str(), d.describe().c_str());
    std::printf(
        "# %d ranks x batch %lld, %d workers, prefetch %d, %s\n", ctx.world_size(),
        static_cast<long long>(lo.batch), lo.workers, lo.prefetch,
        images ? ("images " + std::to_string(lo.image_size) + "x" + std::to_string(lo.image_size) +
                  (lo.augment ? " random-resized-crop + flip" : " center crop") + ", decode " +
                  to_string(lo.decode) + (lo.fast_decode ? " + fast (DCT-scaled)" : ""))
                     .c_str()
               : ("token windows of " + std::to_string(lo.context)).c_str());
    print_epoch_header();
  }
  std::ofstream digests;
  if (!o.dump_digests.empty()) {
    digests.open(o.dump_digests + ".rank" + std::to_string(ctx.rank()));
    if (!digests)
      throw UsageError("--dump-digests " + o.dump_digests + ": cannot write " + o.dump_digests +
                       ".rank" + std::to_string(ctx.rank()));
  }
  std::ofstream ids;
  if (!o.dump_ids.empty()) {
    ids.open(o.dump_ids + ".rank" + std::to_string(ctx.rank()));
    if (!ids)
      throw UsageError("--dump-ids " + o.dump_ids + ": cannot write " + o.dump_ids + ".rank" +
                       std::to_string(ctx.rank()));
  }
  BenchRecord record;
  record.ranks = static_cast<size_t>(ctx.world_size());
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const LoaderTotals before = loader.totals();
    const CacheStats cache_before = cache ? cache->cache_stats() : CacheStats{};
    const StorageStats storage_before = storage->stats();
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
      if (digests) write_digests(digests, epoch, *b);
      if (o.max_batches > 0 && ++n >= o.max_batches) break;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<double> mine =
        epoch_numbers(loader.totals(), before, s, cache ? cache->cache_stats() : CacheStats{},
                      cache_before, storage->stats(), storage_before);
    std::vector<std::string> named;  // rank 0: every rank's first bad samples
    {
      const DeadlineGuard guard(watchdog, o.timeout_s,
                                "gathering epoch " + std::to_string(epoch) + "'s totals");
      record.epochs.push_back(gather_doubles(ctx.comm(), mine));
      named = gather_strings(ctx.comm(), named_bad_lines(loader, ctx.rank()));
    }
    if (ctx.is_root()) {
      print_epoch(record, static_cast<size_t>(epoch), cache != nullptr);
      print_named_bad(named, static_cast<int64_t>(record.bad_samples(static_cast<size_t>(epoch))));
      if (record.sum(static_cast<size_t>(epoch), 0) == 0)
        std::fprintf(stderr,
                     "dtune-data: warning: epoch %d yielded no batch (every sample of a slice "
                     "was bad?): its samples/s is 0\n",
                     epoch);
    }
  }
  if (ctx.is_root()) {
    const StorageStats st = storage->stats();
    std::printf("# rank 0 storage: %lld requests, %.1f MB, %lld retries\n",
                static_cast<long long>(st.requests), st.bytes / 1e6,
                static_cast<long long>(st.retries));
    std::printf("# %.1f samples/s over %d epochs (samples over the slowest rank's time)\n",
                record.samples_per_s(), o.epochs);
  }
  if (file) {
    BenchConfig c;
    c.url = o.url;
    c.description = d.describe();
    c.format = d.format;
    c.cache_dir = o.cache.dir;
    c.tokens = !images;
    c.augment = lo.augment;
    c.decode = to_string(lo.decode);
    c.fast_decode = lo.fast_decode;
    c.drop_last = lo.drop_last;
    c.batch = lo.batch;
    c.max_batches = o.max_batches;
    c.workers = lo.workers;
    c.prefetch = lo.prefetch;
    c.image_size = lo.image_size;
    c.context = lo.context;
    c.epochs = o.epochs;
    c.seed = lo.seed;
    write_bench(*file, c, record);
    file->finish("complete", 0);
    std::printf("# results: %s\n", file->path().c_str());
  }
  return 0;
}

}  // namespace dtune::data
