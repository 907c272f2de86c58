// What accelerator software and hardware this process sees, for provenance and device choice.
// Two implementations: core/cuda/device_info_cuda.cc when built with CUDA, core/device_info_none.cc
// otherwise. Neither throws: a machine without a GPU or driver reports zero devices and empty
// driver version.
#pragma once

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

}  // namespace dtune
