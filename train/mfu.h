// Model FLOPs utilisation: achieved training FLOP/s over the hardware's peak. The peak comes from
// --peak-tflops, else from NVIDIA's datasheet (dense, no sparsity) for the exact model of the
// detected GPU (SXM, PCIe or NVL, told apart by name, SM count and memory size) and the precision
// in use; else from a measured peak (`dtune-probe gemm`: --peak-from FILE, or the newest probe file
// in the results directory; train/measured_peak.h); else none (MFU is NaN).
#pragma once

#include <string>
#include <vector>

#include "core/device_info.h"
#include "train/config.h"

namespace dtune::train {

// One GPU model's dense datasheet peaks, TFLOP/s.
struct GpuSku {
  const char* name;    // "H100 SXM"
  const char* family;  // the name token of cudaDeviceProp::name: "A100", "H100", "H200"
  const char* form;    // "SXM", "PCIe", "NVL"
  int sm_count;        // multiProcessorCount of the full part
  double min_mem_gib;  // totalGlobalMem range of its memory sizes, GiB
  double max_mem_gib;
  double fp32, tf32, half;  // half: bf16 and fp16 tensor cores (fp32 accumulate)
  const char* source;
};

// The SKU that a device is, or nullptr when no row fits its name, SM count and memory (an unknown
// GPU, a MIG slice, a GH200): a name word picks the family ("A100", "H100", "H200") and, when the
// name states one ("NVL", "PCIe", "SXM"), the form factor; a known SM count and memory size must
// match the row's, and tell apart an H100 whose name states none (114 SMs: PCIe; 132 SMs and 94 GB:
// NVL). What is still ambiguous is the SXM part, as PCIe and NVL cards carry it in their names.
const GpuSku* find_gpu_sku(const DeviceProperties& gpu);

struct Peak {
  double tflops = 0;  // per device; 0: unknown
  std::string source;
};
Peak peak_for(const DeviceProperties& gpu, Precision p, double override_tflops);
// The whole order: --peak-tflops, the datasheet, then the measured peak (from `peak_from` when
// given, else the newest dtune-probe file in `results_dir`), for the dtype `p` runs its products
// in; `threads` is the rank's CPU threads (a CPU peak is shared out by threads).
Peak resolve_peak(const DeviceProperties& gpu, Precision p, double override_tflops,
                  const std::string& peak_from, const std::string& results_dir, int threads);
// Every source in that order that knows a peak (tflops > 0), for the checked MFU below to fall back
// through; empty when none does.
std::vector<Peak> peak_candidates(const DeviceProperties& gpu, Precision p, double override_tflops,
                                  const std::string& peak_from, const std::string& results_dir,
                                  int threads);
// achieved / (peak × devices); NaN when the peak or the FLOP count is unknown.
double mfu(double flops_per_sample, double samples, double seconds, const Peak& peak, int devices);

// MFU whose peak the run did not exceed. A utilisation above 100% means the denominator is wrong
// (a measured peak of a slow kernel at a small shape, a wrong --peak-tflops), never that the run
// beat the hardware: such a peak is rejected, named in `rejected`, and the next source in the
// documented order is tried; with none left the MFU is NaN. `valid` is false when any source was
// rejected (the first choice was wrong; the figure, if any, comes from a later one).
struct CheckedMfu {
  double mfu = 0;
  Peak peak;             // the accepted one, or the first source's when none was accepted
  bool valid = true;     // no peak had to be rejected
  std::string rejected;  // "measured (...) 0.0022 TFLOP/s per device, below the 0.0044 achieved"
};
CheckedMfu checked_mfu(double flops_per_sample, double samples, double seconds,
                       const std::vector<Peak>& candidates, const Peak& fallback, int devices);

}  // namespace dtune::train
