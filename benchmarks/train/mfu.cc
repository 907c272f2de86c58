// Datasheet peaks and MFU.
#include "benchmarks/train/mfu.h"

#include <cmath>
#include <limits>

namespace dtune::train {

Peak peak_for(const std::string& device_name, Precision p, double override_tflops) {
  if (override_tflops > 0) return {override_tflops, "--peak-tflops"};
  struct Row { const char* match; double fp32, tf32, half; };
  // Dense peaks, vendor datasheets: A100 (SXM) and H100/H200 (SXM).
  static const Row kRows[] = {{"A100", 19.5, 156, 312}, {"H100", 67, 495, 989}, {"H200", 67, 495, 989}};
  for (const auto& r : kRows) {
    if (device_name.find(r.match) == std::string::npos) continue;
    const double t = p == Precision::kFp32 ? r.fp32 : p == Precision::kTf32 ? r.tf32 : r.half;
    return {t, std::string(r.match) + " datasheet, dense " + to_string(p)};
  }
  return {0, device_name == "cpu" ? "unknown for CPUs: pass --peak-tflops" : "unknown device: pass --peak-tflops"};
}

double mfu(double flops_per_sample, double samples, double seconds, const Peak& peak, int devices) {
  if (peak.tflops <= 0 || seconds <= 0) return std::numeric_limits<double>::quiet_NaN();
  return flops_per_sample * samples / seconds / (peak.tflops * 1e12 * devices);
}

}  // namespace dtune::train
