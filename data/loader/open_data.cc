// Opening a dataset, with the node cache in front when asked (see open_data.h).
#include "data/loader/open_data.h"

#include "core/error.h"

namespace dtune::data {

OpenedData open_data(const std::string& url, const CacheOptions& cache, const std::string& what) {
  OpenedData out;
  try {
    std::unique_ptr<Storage> remote = open_storage(url);
    out.dataset = open_dataset(*remote, &out.indexed);
    if (cache.dir.empty()) {
      out.storage = std::move(remote);
    } else {
      auto cached = std::make_shared<NodeCache>(std::move(remote), cache);
      out.cache = cached.get();
      out.storage = std::move(cached);
    }
  } catch (const NotFound& e) {
    throw UsageError(what + ": " + e.what());
  } catch (const UsageError& e) {
    throw UsageError(what + ": " + e.what());
  }
  return out;
}

}  // namespace dtune::data
