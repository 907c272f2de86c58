// Bytes held by CPU tensors, current and peak, counted by wrapping LibTorch's CPU allocator (every
// CPU tensor's storage comes from it). Deterministic for a given sequence of allocations, unlike
// the process RSS, so the CPU batch-size finder and the out-of-memory check under
// --memory-limit-mb agree exactly. install() once, before the first tensor is made.
#pragma once

#include <cstdint>
#include <string>

namespace dtune::train {

class CpuMemoryMeter {
 public:
  static void install();
  static bool installed();
  static int64_t current_bytes();
  static int64_t peak_bytes();
  static void reset_peak();  // peak := current
};

// Bytes held by tensors on a rank's device: CpuMemoryMeter's on the CPU (`ordinal` < 0), the CUDA
// caching allocator's statistics on GPU `ordinal` (torch.cuda.memory_allocated and
// max_memory_allocated). Every figure of memory "in use" reads one of these, by the device that
// ran.
struct TensorMemory {
  static int64_t current_bytes(int ordinal);
  static int64_t peak_bytes(int ordinal);
  // The most bytes the device's allocator held at once: on a GPU the caching allocator's reserved
  // peak (torch.cuda.max_memory_reserved, its cache included), on the CPU the peak bytes (the
  // counting allocator caches nothing).
  static int64_t peak_reserved_bytes(int ordinal);
  static void reset_peak(int ordinal);  // peak := current
  static std::string source(int ordinal);
};

}  // namespace dtune::train
