// dtune-data bench's results: what every rank measured in every epoch, gathered to rank 0 once
// (BenchRecord), then printed as the table and written as a `benchmark = "data"` run group
// (results/SCHEMA.md), whose summed attributes carry dtune-train's data attribute names so that a
// loader run alone and a training run read the same. Torch-free.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/results_file.h"

namespace dtune::data {

// One rank's numbers for one epoch, in this order.
inline constexpr std::array<const char*, 19> kEpochFields = {
    "batches",      "samples",         "epoch_s",          "fetch_ms",        "decode_ms",
    "wait_ms",      "bad_samples",     "undecodable",      "truncated",       "cache_hits",
    "cache_misses", "cache_hit_bytes", "cache_miss_bytes", "cache_evictions", "bytes",
    "requests",     "retries",         "jpeg_ms",          "coef_bytes"};

// An epoch whose bad samples are more than this share of the samples it read (bad over delivered +
// bad, over all ranks) is flagged in the table ("LOST") and in the results (`epoch_lost_flag`):
// its samples/s and stall are those of the images it delivered, fewer than the dataset holds.
inline constexpr double kLostFractionLimit = 0.01;

// The configuration, as it goes into the group's attributes.
struct BenchConfig {
  std::string url, description, format, cache_dir;
  bool tokens = false, augment = true, drop_last = true, fast_decode = false;
  std::string decode = "roi";
  int64_t batch = 0, max_batches = 0;
  int workers = 0, prefetch = 0, image_size = 0, context = 0, epochs = 0;
  uint64_t seed = 0;
};

struct BenchRecord {
  size_t ranks = 0;
  std::vector<std::vector<double>> epochs;  // (E,) of (R × kEpochFields) in rank-major order
  double at(size_t epoch, size_t rank, size_t field) const {
    return epochs[epoch][rank * kEpochFields.size() + field];
  }
  double sum(size_t epoch, size_t field) const;  // over ranks
  double slowest_s(size_t epoch) const;          // the epoch lasts as long as its slowest rank
  double samples_per_s() const;                  // all samples over the epochs' slowest times
  double lost_fraction(size_t epoch) const;      // bad / (delivered + bad), over ranks
  double bad_samples(size_t epoch) const;        // over ranks
};

// The table's header line (after '#').
void print_epoch_header();

void print_epoch(const BenchRecord& r, size_t epoch, bool cache);
// Root only: one group under /runs with status "ok".
void write_bench(ResultsFile& file, const BenchConfig& c, const BenchRecord& r);

}  // namespace dtune::data
