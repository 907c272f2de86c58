// What accelerator software and hardware this process sees, for provenance and device choice.
// Two implementations: core/cuda/device_info_cuda.cc when built with CUDA, core/device_info_none.cc
// otherwise. Neither throws: a machine without a GPU or driver reports zero devices and empty
// driver version.
#pragma once

#include <cstdint>
#include <string>

namespace dtune {

struct DeviceSummary {
  std::string cuda_runtime_version;  // "13.0"; empty without CUDA
  std::string cuda_driver_version;   // "13.0" (what the driver supports); empty without a driver
  int device_count = 0;              // visible CUDA devices
};

DeviceSummary query_device_summary();
// "cuda:0 NVIDIA H200 (0000:1b:00.0)"; "cpu" when ordinal < 0 or there is no such device.
std::string describe_device(int ordinal);

// What tells GPU models apart (A100 SXM from PCIe, H100 SXM from PCIe and NVL): the name as
// cudaGetDeviceProperties reports it ("NVIDIA H100 80GB HBM3"), its SM count and its memory size.
struct DeviceProperties {
  std::string name;          // empty for a CPU
  int sm_count = 0;          // cudaDeviceProp::multiProcessorCount; 0: unknown
  int64_t memory_bytes = 0;  // cudaDeviceProp::totalGlobalMem; 0: unknown
};
// Empty for ordinal < 0, no such device, or a build without CUDA.
DeviceProperties device_properties(int ordinal);

}  // namespace dtune
