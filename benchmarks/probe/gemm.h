// The gemm probe: achieved TFLOP/s of torch::mm, and on a GPU of cuBLASLt called directly
// (cublaslt_gemm.h), over a sweep of shapes, per dtype, on every rank's device (its GPU, or the CPU
// with --threads intra-op threads). FLOPs = 2·m·n·k per product; each shape runs warm-up products,
// then at least --min-iters and --min-time, each timed alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/probe/probe_results.h"
#include "core/context.h"

namespace dtune::probe {

struct GemmOptions {
  std::vector<std::string> shapes;  // "1024" (square) or "MxNxK"; empty: the device's default
  std::vector<std::string> dtypes;  // empty: fp32 and bf16 on CPU; fp32, tf32, fp16, bf16 on GPU
  int threads = 0;                  // CPU intra-op threads (0: LibTorch's default)
  double min_time_s = 0.2;
  int64_t min_iters = 5;
  int64_t warmup = 2;
  std::string device = "auto";         // auto (the rank's GPU when there is one), cpu, cuda
  std::vector<std::string> libraries;  // torch, cublaslt; empty: both on a GPU, torch on a CPU
  // Per dtype and library: a shape whose predicted time (the last shape's, scaled by FLOPs) would
  // end past this many seconds is not started, and the record says so. 0: no bound.
  double max_seconds = 0;
  bool progress = true;  // rank 0 prints a line per shape (elapsed, the next shape's estimate)
};

// The dtypes the option names (canonical: float32 tf32 float16 bfloat16); throws UsageError for
// others, or for tf32 on a CPU.
std::vector<std::string> gemm_dtypes(const GemmOptions& o, bool cuda);
// The libraries the option names (canonical: torch::mm cublaslt); throws UsageError for others,
// or for cublaslt without a GPU or a CUDA build.
std::vector<std::string> gemm_libraries(const GemmOptions& o, bool cuda);
// Collective over ctx: every rank measures; rank 0 holds every rank's numbers.
std::vector<GemmRecord> run_gemm(const RunContext& ctx, const GemmOptions& o);

}  // namespace dtune::probe
