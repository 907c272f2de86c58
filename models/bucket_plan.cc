// Capped groups of parameters (see bucket_plan.h).
#include "models/bucket_plan.h"

namespace dtune::models {

BucketLayout plan_buckets(const std::vector<int64_t>& param_bytes, int64_t first_cap, int64_t cap) {
  BucketLayout out;
  for (size_t k = param_bytes.size(); k-- > 0;) {
    const int64_t limit = out.params.size() == 1 ? first_cap : cap;  // bucket 0 has its own cap
    if (out.params.empty() || (out.bytes.back() > 0 && out.bytes.back() + param_bytes[k] > limit)) {
      out.params.emplace_back();
      out.bytes.push_back(0);
    }
    out.params.back().push_back(k);
    out.bytes.back() += param_bytes[k];
  }
  return out;
}

}  // namespace dtune::models
