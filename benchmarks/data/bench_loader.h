// dtune-data bench: the loader alone over a dataset, every rank its slice, for a number of epochs:
// samples per second and where the time goes (fetch, decode + transform, the consumer's wait),
// per epoch. --dump-ids writes every sample id a rank received (FILE.rank<r>: "epoch id" lines),
// so tests can check that an epoch covers the dataset exactly once across ranks.
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
  CacheOptions cache;       // dir empty: no cache tier
  bool same_slice = false;  // test only: every rank reads the whole epoch (concurrent cache fills)
  double timeout_s =
      300;  // the ranks' meeting at each epoch's start and end, armed on the watchdog
};

int bench_loader(const RunContext& ctx, Watchdog& watchdog, const BenchOptions& o);

}  // namespace dtune::data
