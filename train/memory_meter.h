// Bytes held by CPU tensors, current and peak, counted by wrapping LibTorch's CPU allocator (every
// CPU tensor's storage comes from it). Deterministic for a given sequence of allocations, unlike
// the process RSS, so the CPU batch-size finder and the out-of-memory check under
// --memory-limit-mb agree exactly. install() once, before the first tensor is made.
#pragma once

#include <cstdint>

namespace dtune::train {

class CpuMemoryMeter {
 public:
  static void install();
  static bool installed();
  static int64_t current_bytes();
  static int64_t peak_bytes();
  static void reset_peak();  // peak := current
};

}  // namespace dtune::train
