// How a model's parameters are cut into groups of capped size, in reverse parameter order (the
// order backward produces their gradients): PyTorch DDP's gradient buckets (25 MiB, the first
// 1 MiB), and the size-capped units of ZeRO-3 (dtune-train --shard-unit MiB, dtune-comm --pattern
// fsdp --shard-unit MiB, dtune model --shard-unit-mb) with one cap for all. Torch-free: dtune-comm
// plans with it from models/model_size.h's parameter sizes, dtune-train from the built model's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtune::models {

struct BucketLayout {
  std::vector<std::vector<size_t>> params;  // per bucket: parameter indices, in order of arrival
  std::vector<int64_t> bytes;               // per bucket, in the parameters' dtype
};
// Reverse parameter order; the first bucket capped at first_cap, later ones at cap (a parameter
// larger than the cap gets a bucket of its own). Pure function, unit-tested; the report's
// scaling_model.py plan_buckets follows it line for line.
BucketLayout plan_buckets(const std::vector<int64_t>& param_bytes, int64_t first_cap, int64_t cap);

}  // namespace dtune::models
