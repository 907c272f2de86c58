// NVML (the NVIDIA driver's management library), loaded with dlopen at run time so that the build
// needs neither the driver nor nvml.h: the GPUs' names and PCI bus ids, and their NVLink links
// (to which PCI device each active link leads). A machine without the driver yields no GPUs and
// says why.
#pragma once

#include <string>
#include <vector>

namespace dtune {

struct NvmlGpu {
  std::string name;    // "NVIDIA H200"
  std::string bus_id;  // "0000:1b:00.0", lower case (as hwloc and sysfs write it)
  // The PCI bus id at the far end of each active NVLink link (a GPU, or an NVSwitch).
  std::vector<std::string> nvlink_peers;
};

struct NvmlReport {
  bool loaded = false;
  std::string status;  // "NVML 12.550 (driver 550.54)", or why NVML is unavailable
  std::vector<NvmlGpu> gpus;
};

// Never throws: every failure ends up in `status`.
NvmlReport query_nvml();

}  // namespace dtune
