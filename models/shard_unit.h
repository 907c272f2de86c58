// --shard-unit, read once for every binary that takes it (dtune-train --shard zero3, dtune-comm
// --pattern fsdp): `block` (one unit per transformer block or ResNet stage) or a size in MiB, the
// cap of models/bucket_plan.h's size-capped units. Torch-free. The size is bounded on both sides
// so that its cap in bytes is a valid int64 (9e12 MiB is past 2^63 bytes: the cast wrapped, and
// every parameter became a unit of its own).
#pragma once

#include <cstdint>
#include <string>

namespace dtune::models {

// 1 PiB: larger than any model's parameters, far below 2^63 bytes.
inline constexpr double kMaxShardUnitMib = 1024.0 * 1024.0 * 1024.0;

struct ShardUnit {
  bool per_block = true;
  double mib = 0;    // > 0 when !per_block, at most kMaxShardUnitMib
  std::string text;  // as given: "block", "4", "0.5"
  // The cap in bytes: mib * 2^20, rounded down, at least 1.
  int64_t cap_bytes() const;
};
// Throws UsageError naming --shard-unit for anything but `block` or a finite number in
// (0, kMaxShardUnitMib].
ShardUnit parse_shard_unit(const std::string& text);
// A size in MiB as a byte cap (dtune-train's ZeRO-3 units from its parsed mib).
int64_t shard_unit_cap_bytes(double mib);

}  // namespace dtune::models
