// Datasheet peaks by exact GPU model, and MFU.
#include "train/mfu.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "train/measured_peak.h"

namespace dtune::train {
namespace {

// Dense peaks (the datasheets' tensor-core figures are "with sparsity": twice these). NVIDIA A100
// Tensor Core GPU datasheet (SXM and PCIe alike; 108 SMs); NVIDIA H100 Tensor Core GPU datasheet
// (SXM 132 SMs, 80 GB; PCIe 114 SMs, 80 GB: bf16 1,513 and TF32 756 sparse, FP32 51; NVL 132 SMs,
// 94 GB: bf16 1,671 and TF32 835 sparse, FP32 60) and NVIDIA H200 datasheet (SXM and NVL, both
// 132 SMs and 141 GB; the NVL's lower power gives the H100 NVL's figures). SM counts: Hopper
// architecture whitepaper; llm.c's llmc/mfu.h holds the same SXM and PCIe core counts (528 and 456
// tensor cores, 4 per SM). Memory ranges are totalGlobalMem in GiB with room for ECC and firmware
// reservations (nvidia-smi: 81,559 MiB on an H100 80GB, 95,830 on an H100 NVL, 143,771 on an H200).
constexpr GpuSku kSkus[] = {
    {"A100 SXM", "A100", "SXM", 108, 38, 81, 19.5, 156, 312, "NVIDIA A100 datasheet"},
    {"A100 PCIe", "A100", "PCIe", 108, 38, 81, 19.5, 156, 312, "NVIDIA A100 datasheet"},
    {"H100 SXM", "H100", "SXM", 132, 60, 84, 67, 495, 989, "NVIDIA H100 datasheet"},
    {"H100 PCIe", "H100", "PCIe", 114, 60, 84, 51, 378, 756, "NVIDIA H100 datasheet"},
    {"H100 NVL", "H100", "NVL", 132, 85, 100, 60, 417.5, 835.5, "NVIDIA H100 datasheet"},
    {"H200 SXM", "H200", "SXM", 132, 130, 145, 67, 495, 989, "NVIDIA H200 datasheet"},
    {"H200 NVL", "H200", "NVL", 132, 130, 145, 60, 417.5, 835.5, "NVIDIA H200 datasheet"},
};

// `token` as a word of `name`: "H200" in "NVIDIA H200 NVL" but not in "NVIDIA GH200 480GB".
bool has_word(const std::string& name, const std::string& token) {
  for (size_t at = name.find(token); at != std::string::npos; at = name.find(token, at + 1)) {
    const bool start = at == 0 || name[at - 1] == ' ' || name[at - 1] == '-';
    const size_t end = at + token.size();
    const bool stop = end == name.size() || name[end] == ' ' || name[end] == '-';
    if (start && stop) return true;
  }
  return false;
}

// The form factor the name states, or "" (e.g. "NVIDIA H100 80GB HBM3", "NVIDIA H200": SXM parts).
std::string form_in_name(const std::string& name) {
  if (has_word(name, "NVL")) return "NVL";
  if (has_word(name, "PCIe") || has_word(name, "PCIE")) return "PCIe";
  if (name.find("SXM") != std::string::npos) return "SXM";  // "A100-SXM4-80GB"
  return "";
}

}  // namespace

const GpuSku* find_gpu_sku(const DeviceProperties& gpu) {
  const std::string form = form_in_name(gpu.name);
  const double mem_gib = static_cast<double>(gpu.memory_bytes) / (1LL << 30);
  const GpuSku* found = nullptr;
  for (const auto& s : kSkus) {
    if (!has_word(gpu.name, s.family) || (!form.empty() && form != s.form)) continue;
    if (gpu.sm_count > 0 && gpu.sm_count != s.sm_count) continue;
    if (gpu.memory_bytes > 0 && (mem_gib < s.min_mem_gib || mem_gib > s.max_mem_gib)) continue;
    // Several fit a name that states no form factor when the SM count and memory cannot tell them
    // apart (or are unknown): the SXM part, as PCIe and NVL cards name theirs.
    if (!found || std::string(s.form) == "SXM") found = &s;
  }
  return found;
}

Peak peak_for(const DeviceProperties& gpu, Precision p, double override_tflops) {
  if (override_tflops > 0) return {override_tflops, "--peak-tflops"};
  if (gpu.name.empty()) return {0, "unknown for CPUs: pass --peak-tflops"};
  const GpuSku* s = find_gpu_sku(gpu);
  if (!s) {
    char what[256];
    std::snprintf(
        what, sizeof what, "unknown for \"%s\" with %d SMs and %.1f GiB: pass --peak-tflops",
        gpu.name.c_str(), gpu.sm_count, static_cast<double>(gpu.memory_bytes) / (1LL << 30));
    return {0, what};
  }
  const double t = p == Precision::kFp32 ? s->fp32 : p == Precision::kTf32 ? s->tf32 : s->half;
  return {t, std::string(s->name) + ", " + s->source + ", dense " + to_string(p)};
}

Peak resolve_peak(const DeviceProperties& gpu, Precision p, double override_tflops,
                  const std::string& peak_from, const std::string& results_dir, int threads) {
  Peak peak = peak_for(gpu, p, override_tflops);
  if (peak.tflops > 0) return peak;
  const bool cuda = !gpu.name.empty();
  const std::string device = cuda ? "cuda" : "cpu";
  const std::string dtype = gemm_dtype_for(to_string(p), cuda);
  const std::optional<MeasuredPeak> m =
      peak_from.empty() ? newest_measured_peak(results_dir, device, dtype, threads)
                        : read_measured_peak(peak_from, device, dtype, threads);
  if (m) return {m->tflops, m->source};
  const std::string where = peak_from.empty() ? "no dtune-probe file in " + results_dir
                                              : "none in --peak-from " + peak_from;
  return {0, peak.source + " or run dtune-probe gemm (" + where + " with a " + dtype + " gemm on " +
                 device + ")"};
}

std::vector<Peak> peak_candidates(const DeviceProperties& gpu, Precision p, double override_tflops,
                                  const std::string& peak_from, const std::string& results_dir,
                                  int threads) {
  std::vector<Peak> out;
  if (override_tflops > 0) out.push_back(peak_for(gpu, p, override_tflops));
  const Peak sheet = peak_for(gpu, p, 0);
  if (sheet.tflops > 0) out.push_back(sheet);
  const bool cuda = !gpu.name.empty();
  const std::string dtype = gemm_dtype_for(to_string(p), cuda);
  const std::optional<MeasuredPeak> m =
      peak_from.empty() ? newest_measured_peak(results_dir, cuda ? "cuda" : "cpu", dtype, threads)
                        : read_measured_peak(peak_from, cuda ? "cuda" : "cpu", dtype, threads);
  if (m) out.push_back({m->tflops, m->source});
  return out;
}

CheckedMfu checked_mfu(double flops_per_sample, double samples, double seconds,
                       const std::vector<Peak>& candidates, const Peak& fallback, int devices) {
  CheckedMfu r;
  r.peak = fallback;
  r.mfu = mfu(flops_per_sample, samples, seconds, fallback, devices);
  if (candidates.empty() || std::isnan(r.mfu)) return r;
  const double achieved_tflops = flops_per_sample * samples / seconds / 1e12 / devices;
  for (const Peak& p : candidates) {
    const double u = mfu(flops_per_sample, samples, seconds, p, devices);
    if (u <= 1.0) {
      r.mfu = u;
      r.peak = p;
      return r;
    }
    r.valid = false;
    char what[512];
    std::snprintf(what, sizeof what,
                  "%s%s: %.4g TFLOP/s per device, below the %.4g TFLOP/s this run achieved, so it "
                  "cannot be the peak",
                  r.rejected.empty() ? "" : "; ", p.source.c_str(), p.tflops, achieved_tflops);
    r.rejected += what;
  }
  r.mfu = std::numeric_limits<double>::quiet_NaN();  // no source left whose peak holds
  r.peak = {0, "none that holds (" + r.rejected + ")"};
  return r;
}

double mfu(double flops_per_sample, double samples, double seconds, const Peak& peak, int devices) {
  if (peak.tflops <= 0 || seconds <= 0 || !(flops_per_sample > 0))
    return std::numeric_limits<double>::quiet_NaN();
  return flops_per_sample * samples / seconds / (peak.tflops * 1e12 * devices);
}

}  // namespace dtune::train
