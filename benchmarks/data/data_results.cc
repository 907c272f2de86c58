// Printing and writing dtune-data bench's results (see data_results.h).
#include "benchmarks/data/data_results.h"

#include <algorithm>
#include <cstdio>

#include "core/h5.h"

namespace dtune::data {
namespace {

constexpr size_t kF = kEpochFields.size();
enum Field : size_t {
  kBatches,
  kSamples,
  kSeconds,
  kFetch,
  kDecode,
  kWait,
  kBad,
  kUndecodable,
  kTruncated,
  kHits,
  kMisses,
  kHitBytes,
  kMissBytes,
  kEvictions,
  kBytes,
  kRequests,
  kRetries,
  kJpeg,
  kCoefBytes
};

// The run's totals under dtune-train's data attribute names (results/SCHEMA.md, "train"), summed
// over ranks and epochs.
constexpr std::array<std::pair<const char*, Field>, 18> kTrainNames = {{
    {"data_samples", kSamples},
    {"data_batches", kBatches},
    {"data_bad_samples", kBad},
    {"data_undecodable", kUndecodable},
    {"data_truncated", kTruncated},
    {"data_bytes", kBytes},
    {"data_requests", kRequests},
    {"data_retries", kRetries},
    {"data_fetch_ms", kFetch},
    {"data_decode_ms", kDecode},
    {"data_jpeg_ms", kJpeg},
    {"data_coef_bytes", kCoefBytes},
    {"data_wait_ms", kWait},
    {"cache_hits", kHits},
    {"cache_misses", kMisses},
    {"cache_hit_bytes", kHitBytes},
    {"cache_miss_bytes", kMissBytes},
    {"cache_evictions", kEvictions},
}};

}  // namespace

double BenchRecord::sum(size_t epoch, size_t field) const {
  double s = 0;
  for (size_t r = 0; r < ranks; ++r) s += at(epoch, r, field);
  return s;
}

double BenchRecord::slowest_s(size_t epoch) const {
  double s = 0;
  for (size_t r = 0; r < ranks; ++r) s = std::max(s, at(epoch, r, kSeconds));
  return s;
}

double BenchRecord::samples_per_s() const {
  double samples = 0, seconds = 0;
  for (size_t e = 0; e < epochs.size(); ++e) {
    samples += sum(e, kSamples);
    seconds += slowest_s(e);
  }
  return seconds > 0 ? samples / seconds : 0.0;
}

double BenchRecord::lost_fraction(size_t e) const {
  const double bad = sum(e, kBad), read = sum(e, kSamples) + bad;
  return read > 0 ? bad / read : 0.0;
}

double BenchRecord::bad_samples(size_t e) const { return sum(e, kBad); }

void print_epoch_header() {
  std::printf("# %-6s %8s %10s %12s %10s %10s %10s %6s %8s %10s %11s %9s %6s %5s %10s %8s\n",
              "epoch", "batches", "samples", "samples/s", "fetch_ms", "decode_ms", "wait_ms", "bad",
              "hit%", "fetched_MB", "undecodable", "truncated", "lost%", "flag", "jpeg_ms",
              "coef_KB");
  std::printf(
      "# samples, samples/s and wait_ms cover the samples delivered; lost%% = bad / (delivered + "
      "bad); flag LOST: above %.0f%%\n",
      100 * kLostFractionLimit);
  std::printf(
      "# decode_ms: JPEG decode + crop/resize/normalise, of which jpeg_ms the decoder; coef_KB: "
      "DCT coefficients inverse-transformed per image\n");
}

void print_epoch(const BenchRecord& r, size_t e, bool cache) {
  const double lookups = r.sum(e, kHits) + r.sum(e, kMisses);
  char hit[16] = "-";
  if (cache) std::snprintf(hit, sizeof hit, "%.1f", 100 * r.sum(e, kHits) / std::max(1.0, lookups));
  const double lost = r.lost_fraction(e);
  const double decoded = r.sum(e, kSamples);  // delivered images (each decoded once)
  std::printf(
      "  %-6zu %8.0f %10.0f %12.1f %10.1f %10.1f %10.1f %6.0f %8s %10.2f %11.0f %9.0f %6.1f %5s "
      "%10.1f %8.1f\n",
      e, r.sum(e, kBatches), r.sum(e, kSamples),
      r.slowest_s(e) > 0 ? r.sum(e, kSamples) / r.slowest_s(e) : 0.0, r.sum(e, kFetch),
      r.sum(e, kDecode), r.sum(e, kWait), r.sum(e, kBad), hit,
      cache ? r.sum(e, kMissBytes) / 1e6 : 0.0, r.sum(e, kUndecodable), r.sum(e, kTruncated),
      100 * lost, lost > kLostFractionLimit ? "LOST" : "-", r.sum(e, kJpeg),
      decoded > 0 ? r.sum(e, kCoefBytes) / decoded / 1e3 : 0.0);
}

void write_bench(ResultsFile& file, const BenchConfig& c, const BenchRecord& r) {
  h5::Handle g = file.new_run("data-" + c.format + "-b" + std::to_string(c.batch) + "-w" +
                              std::to_string(c.workers));
  const hid_t id = g.get();
  h5::write_attr(id, "benchmark", "data");
  h5::write_attr(id, "status", "ok");
  h5::write_attr(id, "data", c.url);
  h5::write_attr(id, "data_description", c.description);
  h5::write_attr(id, "format", c.format);
  h5::write_attr(id, "cache_dir", c.cache_dir);
  h5::write_attr(id, "batch", c.batch);
  h5::write_attr(id, "workers", c.workers);
  h5::write_attr(id, "prefetch", c.prefetch);
  h5::write_attr(id, "image_size", c.tokens ? 0 : c.image_size);
  h5::write_attr(id, "context", c.tokens ? c.context : 0);
  h5::write_attr(id, "augment", static_cast<int64_t>(c.augment));
  h5::write_attr(id, "decode", c.tokens ? std::string() : c.decode);
  h5::write_attr(id, "fast_decode", static_cast<int64_t>(!c.tokens && c.fast_decode));
  h5::write_attr(id, "drop_last", static_cast<int64_t>(c.drop_last));
  h5::write_attr(id, "seed", static_cast<int64_t>(c.seed));
  h5::write_attr(id, "epochs", c.epochs);
  h5::write_attr(id, "max_batches", c.max_batches);
  h5::write_attr(id, "world_size", static_cast<int64_t>(r.ranks));
  h5::write_attr(id, "samples_per_s", r.samples_per_s());
  for (const auto& [name, field] : kTrainNames) {
    double total = 0;
    for (size_t e = 0; e < r.epochs.size(); ++e) total += r.sum(e, field);
    h5::write_attr(id, name, total);
  }
  // Per epoch and rank: (E, R) for each field; (E,) samples/s over the slowest rank.
  const size_t E = r.epochs.size(), R = r.ranks;
  std::vector<double> column(E * R);
  for (size_t f = 0; f < kF; ++f) {
    for (size_t e = 0; e < E; ++e)
      for (size_t k = 0; k < R; ++k) column[e * R + k] = r.at(e, k, f);
    h5::write_dataset(id, kEpochFields[f], {E, R}, column.data());
  }
  std::vector<double> rate(E);
  for (size_t e = 0; e < E; ++e)
    rate[e] = r.slowest_s(e) > 0 ? r.sum(e, kSamples) / r.slowest_s(e) : 0.0;
  h5::write_dataset(id, "epoch_samples_per_s", {E}, rate.data());
  std::vector<double> lost(E), flag(E);
  for (size_t e = 0; e < E; ++e) {
    lost[e] = r.lost_fraction(e);
    flag[e] = lost[e] > kLostFractionLimit ? 1.0 : 0.0;
  }
  h5::write_dataset(id, "epoch_lost_fraction", {E}, lost.data());
  h5::write_dataset(id, "epoch_lost_flag", {E}, flag.data());
  h5::write_attr(id, "lost_fraction_limit", kLostFractionLimit);
  g.close();
  file.flush();
}

}  // namespace dtune::data
