// Device information from the CUDA runtime. Never throws: without a driver or a GPU every query
// fails softly to empty versions and zero devices. Each failed query's error is cleared with
// cudaGetLastError so it cannot surface later in an unrelated DTUNE_CUDA_CHECK.
#include <cuda_runtime_api.h>

#include <cctype>
#include <string>

#include "core/device_info.h"

namespace dtune {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor: 13000 -> "13.0".
std::string format_cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace

DeviceSummary query_device_summary() {
  DeviceSummary s;
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess && v > 0)
    s.cuda_runtime_version = format_cuda_version(v);
  else
    cudaGetLastError();
  v = 0;
  // Succeeds with 0 when no driver is installed.
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
    s.cuda_driver_version = format_cuda_version(v);
  else
    cudaGetLastError();
  s.device_count = visible_device_count();
  return s;
}

std::string describe_device(int ordinal) {
  if (ordinal < 0 || ordinal >= visible_device_count()) return "cpu";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return "cuda:" + std::to_string(ordinal);
  }
  std::string out = "cuda:" + std::to_string(ordinal) + " " + prop.name;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess) {
    // CUDA prints hex digits in upper case; lspci and sysfs use lower case, which is what people
    // grep.
    std::string id = bus;
    for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += " (" + id + ")";
  } else {
    cudaGetLastError();
  }
  return out;
}

DeviceProperties device_properties(int ordinal) {
  if (ordinal < 0 || ordinal >= visible_device_count()) return {};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {prop.name, prop.multiProcessorCount, static_cast<int64_t>(prop.totalGlobalMem)};
}

}  // namespace dtune
