// Peak GPU memory from LibTorch's CUDA caching allocator (what torch.cuda.max_memory_allocated
// reports), and releasing its cache between batch-size tries. Defined in cuda_memory.cc when
// built with CUDA; the CPU-only twin returns 0 and does nothing.
#pragma once

#include <cstdint>

namespace dtune::train {

int64_t cuda_peak_allocated_bytes(int device);
// What torch.cuda.max_memory_reserved reports: the most bytes the allocator held from the device
// (its cached blocks too: a freed block whose stream's work is still queued is not reusable yet).
int64_t cuda_peak_reserved_bytes(int device);
// What torch.cuda.memory_allocated reports: bytes of live tensors on `device`.
int64_t cuda_allocated_bytes(int device);
// Peak := current, keeping the cache (torch.cuda.reset_peak_memory_stats).
void cuda_reset_peak(int device);
void cuda_reset_peak_and_cache(int device);
// 90% of the device's memory: the batch finder's safety margin.
int64_t cuda_usable_bytes(int device);

}  // namespace dtune::train
