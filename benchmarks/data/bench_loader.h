// dtune-data bench: the loader alone over a dataset, every rank its slice, for a number of epochs:
// samples per second and where the time goes (fetch, decode + transform, the consumer's wait),
// per epoch. --dump-ids writes every sample id a rank received (FILE.rank<r>: "epoch id" lines),
// so tests can check that an epoch covers the dataset exactly once across ranks; --dump-digests
// adds a digest of each delivered tensor, so that they can check what was delivered too. Each
// epoch's bad samples are named on rank 0 (the first few, then a count), and an epoch that lost
// more than kLostFractionLimit of the samples it read is flagged (data_results.h). Rank 0 writes
// the results file (a `benchmark = "data"` group, results/SCHEMA.md). An epoch that would give a
// rank no batch at all (a slice smaller than --batch) is refused before anything runs.
#pragma once

#include <string>

#include "core/context.h"
#include "core/watchdog.h"
#include "data/cache/node_cache.h"
#include "data/loader/loader.h"

namespace dtune::data {

struct BenchOptions {
  std::string url;
  LoaderOptions loader;
  int epochs = 1;
  int64_t max_batches = 0;  // per epoch (0: all)
  std::string dump_ids;
  std::string dump_digests;  // test only: FILE.rank<r> gets "epoch id label digest" lines
  CacheOptions cache;        // dir empty: no cache tier
  bool same_slice = false;   // test only: every rank reads the whole epoch (concurrent cache fills)
  double timeout_s =
      300;             // the ranks' meeting at each epoch's start and end, armed on the watchdog
  std::string output;  // results file; empty: none (--no-output)
  bool overwrite = false;
  std::string command_line;
};

// The samples of the smallest rank slice of an epoch (rank_slice's sizes differ by at most one):
// with drop_last, fewer than --batch there means that rank gets no batch.
int64_t smallest_slice(int64_t samples, int world);

int bench_loader(const RunContext& ctx, Watchdog& watchdog, const BenchOptions& o);

}  // namespace dtune::data
