// --shard-unit's grammar and bounds (shard_unit.h).
#include "models/shard_unit.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace dtune::models {

int64_t shard_unit_cap_bytes(double mib) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(mib * 1048576.0)));
}

int64_t ShardUnit::cap_bytes() const { return shard_unit_cap_bytes(mib); }

ShardUnit parse_shard_unit(const std::string& text) {
  if (text == "block") return {true, 0, text};
  char* end = nullptr;
  const double mib = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(mib) || mib <= 0 ||
      mib > kMaxShardUnitMib)
    throw UsageError("--shard-unit " + text +
                     ": give block (one unit per transformer block or ResNet stage) or a size "
                     "in MiB greater than 0 and at most 1073741824 (1 PiB), e.g. 4 or 0.5");
  return {false, mib, text};
}

}  // namespace dtune::models
