// Opening a dataset for reading, as dtune-train --data and dtune-data bench both do: its storage
// (one connection check), its manifest or an index made on the spot, and, when a cache directory
// is given, the node cache in front of that same storage. Torch-free.
#pragma once

#include <memory>
#include <string>

#include "data/cache/node_cache.h"
#include "data/formats/dataset.h"

namespace dtune::data {

struct OpenedData {
  std::shared_ptr<Storage> storage;  // the cache when there is one, else the dataset's storage
  NodeCache* cache = nullptr;        // inside `storage`, or null
  Dataset dataset;
  bool indexed = false;  // no dataset.json: indexed now
};

// A missing path, bucket or object, or a root holding no dataset, is a UsageError that starts
// with `what` (the flag or URL to fix).
OpenedData open_data(const std::string& url, const CacheOptions& cache, const std::string& what);

}  // namespace dtune::data
