// cuBLASLt matrix products for the gemm probe, beside torch::mm: C = A·B, row-major and dense, on
// the current CUDA device, in one of the probe's dtypes (float32; tf32: fp32 data, TF32 tensor-core
// compute; float16 and bfloat16 with fp32 accumulation and scale, as torch::mm). The algorithm is
// the first of cublasLtMatmulAlgoGetHeuristic's, within a workspace; each product is timed with
// CUDA events on a stream of its own. Compiled with CUDA only (cublaslt_gemm_cuda.cc); without it
// (cublaslt_gemm_none.cc) cublaslt_available() is false and LtGemm's constructor throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dtune::probe {

// NVIDIA's advice for Hopper (cuBLAS docs, cublasLtMatmul workspace): 32 MiB.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

bool cublaslt_available();

class LtGemm {
 public:
  // One (m, n, k, dtype) problem on CUDA device `device` (made current): its descriptors,
  // layouts, workspace, stream, events and the algorithm the heuristic chose.
  LtGemm(int device, int64_t m, int64_t n, int64_t k, const std::string& dtype,
         size_t workspace_bytes = kLtWorkspaceBytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  LtGemm(LtGemm&&) noexcept;
  LtGemm& operator=(LtGemm&&) noexcept;

  // c (m, n) = a (m, k) · b (k, n): device pointers to row-major arrays in the dtype (float for
  // float32 and tf32). Returns the product's time in ms between two CUDA events.
  double run_ms(const void* a, const void* b, void* c);
  // "cuBLASLt algo 21, tile 256x128, splitK 1, workspace 32M" (what the heuristic chose).
  std::string algorithm() const;
  size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtune::probe
