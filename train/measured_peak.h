// A measured peak for MFU: the best shape's TFLOP/s of a `dtune-probe gemm` run (results/SCHEMA.md,
// probe "gemm") on the same kind of device and in the dtype that the training precision uses. Read
// from --peak-from FILE, or from the newest dtune-probe-*.h5 in the results directory. On a CPU the
// probe's figure covers its thread count; a rank with fewer threads gets its share (linear in
// threads, an assumption the source string states). Torch-free.
#pragma once

#include <optional>
#include <string>

namespace dtune::train {

struct MeasuredPeak {
  double tflops = 0;   // per rank, after the thread share
  std::string source;  // "measured (dtune-probe gemm): float32 on cpu, ... in FILE"
};

// The gemm dtype a training precision runs its products in: fp32 -> float32, tf32 -> tf32 on a
// GPU (float32 on a CPU), fp16 -> float16, bf16 -> bfloat16.
std::string gemm_dtype_for(const std::string& precision, bool cuda);

// The peak in FILE for `device` ("cpu", "cuda") and `dtype`; nullopt when FILE holds no such gemm
// run. Throws UsageError when FILE cannot be read as an HDF5 file.
std::optional<MeasuredPeak> read_measured_peak(const std::string& file, const std::string& device,
                                               const std::string& dtype, int rank_threads);
// The newest (by modification time) dtune-probe-*.h5 in `dir` that holds such a run.
std::optional<MeasuredPeak> newest_measured_peak(const std::string& dir, const std::string& device,
                                                 const std::string& dtype, int rank_threads);

}  // namespace dtune::train
