// libtorch_cuda.so through dlopen (see torch_cuda.h).
#include "core/torch_cuda.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <string>

namespace dtune {
namespace {

std::string g_error;  // torch_cuda_load_error()

// The folder of the loaded libtorch_cpu.so (with its trailing '/'), or "" when none is loaded.
std::string torch_lib_dir() {
  std::string dir;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const size_t slash = path.rfind('/');
        if (slash == std::string::npos ||
            path.compare(slash + 1, std::string::npos, "libtorch_cpu.so") != 0)
          return 0;
        *static_cast<std::string*>(out) = path.substr(0, slash + 1);
        return 1;
      },
      &dir);
  return dir;
}

}  // namespace

std::string load_torch_cuda() {
  const std::string dir = torch_lib_dir();
  if (dir.empty()) return "this process did not load libtorch_cpu.so";
  const std::string path = dir + "libtorch_cuda.so";
  // RTLD_GLOBAL: as a library the executable needed, its symbols resolve for what loads later.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* e = dlerror();
    return e ? e : ("dlopen " + path + " failed");
  }
  return "";
}

void load_torch_cuda_if_driver() {
  static const bool once = [] {
    if (torch_lib_dir().empty()) return false;  // no LibTorch here (dtune-comm, the CPU tests)
    // The driver's library is what the CUDA runtime itself loads; without it no CUDA call can
    // succeed, so LibTorch's CUDA half would only cost its start-up.
    // Kept loaded: the runtime's own dlopen finds it there.
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) return false;
    g_error = load_torch_cuda();
    if (!g_error.empty())
      std::fprintf(stderr,
                   "dtune: warning: a CUDA driver is installed but LibTorch's CUDA library did "
                   "not load (%s): CUDA is unavailable to this process\n",
                   g_error.c_str());
    return true;
  }();
  (void)once;
}

const std::string& torch_cuda_load_error() { return g_error; }

}  // namespace dtune
