// NVML through dlopen (see nvml_loader.h). The few declarations dtune needs are restated here
// from nvml.h (NVML API v11+: the _v2/_v3 entry points and nvmlPciInfo_t's layout).
#include "core/nvml_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>

namespace dtune {
namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // "00000000:1B:00.0"
};
constexpr unsigned kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper, Blackwell)

// "00000000:1B:00.0" -> "0000:1b:00.0": sysfs and hwloc write a 4-digit domain in lower case.
std::string normalise_bus_id(const char* raw) {
  std::string s(raw);
  const size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 4) s = s.substr(colon - 4);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

NvmlReport query_nvml() {
  NvmlReport r;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    r.status = "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver)";
    return r;
  }
  auto init = symbol<nvmlReturn_t (*)()>(lib, "nvmlInit_v2");
  auto shutdown = symbol<nvmlReturn_t (*)()>(lib, "nvmlShutdown");
  auto count = symbol<nvmlReturn_t (*)(unsigned*)>(lib, "nvmlDeviceGetCount_v2");
  auto handle =
      symbol<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto name = symbol<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(lib, "nvmlDeviceGetName");
  auto pci = symbol<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>(lib, "nvmlDeviceGetPciInfo_v3");
  auto link_state =
      symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>(lib, "nvmlDeviceGetNvLinkState");
  auto link_remote = symbol<nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlPciInfo_t*)>(
      lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto driver = symbol<nvmlReturn_t (*)(char*, unsigned)>(lib, "nvmlSystemGetDriverVersion");
  if (!init || !shutdown || !count || !handle || !name || !pci) {
    r.status = "NVML unavailable: libnvidia-ml.so.1 lacks the v2/v3 entry points";
    dlclose(lib);
    return r;
  }
  if (const int rc = init(); rc != 0) {
    r.status = "NVML unavailable: nvmlInit_v2 returned " + std::to_string(rc);
    dlclose(lib);
    return r;
  }
  r.loaded = true;
  char version[96] = "?";
  if (driver) driver(version, sizeof version);
  r.status = std::string("NVML loaded (driver ") + version + ")";
  unsigned n = 0;
  if (count(&n) != 0) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    if (handle(i, &dev) != 0) continue;
    NvmlGpu g;
    char buf[96] = {};
    if (name(dev, buf, sizeof buf) == 0) g.name = buf;
    nvmlPciInfo_t info{};
    if (pci(dev, &info) == 0) g.bus_id = normalise_bus_id(info.busId);
    for (unsigned link = 0; link_state && link_remote && link < kMaxNvLinks; ++link) {
      int active = 0;
      if (link_state(dev, link, &active) != 0 || !active) continue;
      nvmlPciInfo_t remote{};
      if (link_remote(dev, link, &remote) == 0)
        g.nvlink_peers.push_back(normalise_bus_id(remote.busId));
    }
    r.gpus.push_back(std::move(g));
  }
  shutdown();
  dlclose(lib);
  return r;
}

}  // namespace dtune
