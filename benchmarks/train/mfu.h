// Model FLOPs utilisation: achieved training FLOP/s over the hardware's peak. The peak comes from
// --peak-tflops, else from the vendor datasheet (dense, no sparsity) of the detected GPU for the
// precision in use (../shared/REFERENCE.md); a CPU has no peak unless one is given (MFU is NaN).
#pragma once

#include <string>

#include "benchmarks/train/options.h"

namespace dtune::train {

struct Peak {
  double tflops = 0;  // per device; 0: unknown
  std::string source;
};
Peak peak_for(const std::string& device_name, Precision p, double override_tflops);
// achieved / (peak × devices); NaN when the peak is unknown.
double mfu(double flops_per_sample, double samples, double seconds, const Peak& peak, int devices);

}  // namespace dtune::train
