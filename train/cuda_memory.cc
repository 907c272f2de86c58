// CUDA caching allocator statistics.
#include "train/cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

namespace dtune::train {

int64_t cuda_peak_allocated_bytes(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

int64_t cuda_peak_reserved_bytes(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

int64_t cuda_allocated_bytes(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

void cuda_reset_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void cuda_reset_peak_and_cache(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  alloc::emptyCache();
  alloc::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

int64_t cuda_usable_bytes(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return 0;
  return static_cast<int64_t>(0.9 * static_cast<double>(prop.totalGlobalMem));
}

}  // namespace dtune::train
