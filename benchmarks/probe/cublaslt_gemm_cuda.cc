// cuBLASLt products with CUDA (see cublaslt_gemm.h). cuBLASLt is column-major: a row-major (r, c)
// array is the column-major (c, r) matrix, its transpose. So row-major C = A·B is computed as the
// column-major C^T (n, m) = B^T (n, k) · A^T (k, m): Lt's first operand is b, its second a, no
// transposes, leading dimensions n, k and n.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "benchmarks/probe/cublaslt_gemm.h"
#include "core/cli.h"
#include "core/cuda/cuda_error.h"

namespace dtune::probe {
namespace {

struct LtTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};

LtTypes lt_types(const std::string& dtype) {
  if (dtype == "float32") return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
  if (dtype == "tf32") return {CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
  if (dtype == "float16") return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
  if (dtype == "bfloat16") return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
  throw Error("cuBLASLt gemm: no dtype '" + dtype + "' (float32, tf32, float16, bfloat16)");
}

}  // namespace

bool cublaslt_available() { return true; }

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;  // b's, a's, c's
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (stop) DTUNE_CUDA_WARN(cudaEventDestroy(stop));
    if (start) DTUNE_CUDA_WARN(cudaEventDestroy(start));
    if (stream) DTUNE_CUDA_WARN(cudaStreamDestroy(stream));
    if (workspace) DTUNE_CUDA_WARN(cudaFree(workspace));
    if (pref) DTUNE_CUBLAS_WARN(cublasLtMatmulPreferenceDestroy(pref));
    for (cublasLtMatrixLayout_t l : {lt_c, lt_b, lt_a})
      if (l) DTUNE_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(l));
    if (op) DTUNE_CUBLAS_WARN(cublasLtMatmulDescDestroy(op));
    if (handle) DTUNE_CUBLAS_WARN(cublasLtDestroy(handle));
  }
};

LtGemm::LtGemm(int device, int64_t m, int64_t n, int64_t k, const std::string& dtype,
               size_t workspace_bytes)
    : impl_(std::make_unique<Impl>()) {
  const LtTypes t = lt_types(dtype);
  Impl& p = *impl_;
  DTUNE_CUDA_CHECK(cudaSetDevice(device));
  DTUNE_CUBLAS_CHECK(cublasLtCreate(&p.handle));
  DTUNE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, t.compute, CUDA_R_32F));  // fp32 alpha, beta
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  DTUNE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lt_a, t.data, u(n), u(k), n));  // B^T (n, k)
  DTUNE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lt_b, t.data, u(k), u(m), k));  // A^T (k, m)
  DTUNE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lt_c, t.data, u(n), u(m), n));  // C^T (n, m)
  p.workspace_bytes = workspace_bytes;
  if (workspace_bytes > 0) DTUNE_CUDA_CHECK(cudaMalloc(&p.workspace, workspace_bytes));
  DTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p.pref));
  const uint64_t max_workspace = workspace_bytes;  // the attribute is a uint64_t
  DTUNE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof max_workspace));
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  DTUNE_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(p.handle, p.op, p.lt_a, p.lt_b, p.lt_c, p.lt_c,
                                                    p.pref, 1, &best, &found));
  if (found == 0)
    throw Error("cuBLASLt: no algorithm for a " + dtype + " product " + std::to_string(m) + "x" +
                std::to_string(n) + "x" + std::to_string(k) + " within a " +
                format_size(workspace_bytes) + " workspace");
  p.algo = best.algo;
  DTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  DTUNE_CUDA_CHECK(cudaEventCreate(&p.start));
  DTUNE_CUDA_CHECK(cudaEventCreate(&p.stop));
}

LtGemm::~LtGemm() = default;
LtGemm::LtGemm(LtGemm&&) noexcept = default;
LtGemm& LtGemm::operator=(LtGemm&&) noexcept = default;

double LtGemm::run_ms(const void* a, const void* b, void* c) {
  Impl& p = *impl_;
  const float alpha = 1.0f, beta = 0.0f;
  DTUNE_CUDA_CHECK(cudaEventRecord(p.start, p.stream));
  DTUNE_CUBLAS_CHECK(cublasLtMatmul(p.handle, p.op, &alpha, b, p.lt_a, a, p.lt_b, &beta, c, p.lt_c,
                                    c, p.lt_c, &p.algo, p.workspace, p.workspace_bytes, p.stream));
  DTUNE_CUDA_CHECK(cudaEventRecord(p.stop, p.stream));
  DTUNE_CUDA_CHECK(cudaEventSynchronize(p.stop));
  float ms = 0;
  DTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
  return ms;
}

std::string LtGemm::algorithm() const {
  const Impl& p = *impl_;
  int id = -1, split_k = 1;
  uint32_t tile = 0;
  size_t got = 0;
  (void)cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id,
                                             &got);
  (void)cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof tile, &got);
  (void)cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k,
                                             sizeof split_k, &got);
  return "cuBLASLt algo " + std::to_string(id) + ", tile id " + std::to_string(tile) + ", splitK " +
         std::to_string(split_k) + ", workspace " + format_size(p.workspace_bytes);
}

size_t LtGemm::workspace_bytes() const { return impl_->workspace_bytes; }

}  // namespace dtune::probe
