// dtune-probe's cuBLASLt product (benchmarks/probe/cublaslt_gemm.h) against torch::mm on the same
// inputs, per dtype, on a small shape with m, n and k all different (a row/column-major mix-up
// fails it), and against the exact product in float64. Skips itself, visibly, without a GPU.
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>

#include "benchmarks/probe/cublaslt_gemm.h"

namespace dtune::probe {
namespace {

torch::ScalarType type_of(const std::string& dtype) {
  if (dtype == "float16") return torch::kHalf;
  if (dtype == "bfloat16") return torch::kBFloat16;
  return torch::kFloat;
}

// Largest |x - y| over the largest |y|: products of k = 64 terms in the dtype's precision.
double relative_error(const torch::Tensor& x, const torch::Tensor& y) {
  return (x.to(torch::kDouble).cpu() - y.to(torch::kDouble).cpu()).abs().max().item<double>() /
         y.to(torch::kDouble).abs().max().item<double>();
}

class CublasLtGemm : public ::testing::TestWithParam<std::pair<std::string, double>> {};

TEST_P(CublasLtGemm, EqualsTorchMmAndTheExactProduct) {
  if (torch::cuda::device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible (torch::cuda::device_count)";
  ASSERT_TRUE(cublaslt_available());
  const auto [dtype, tolerance] = GetParam();
  const int64_t m = 96, n = 80, k = 64;
  torch::manual_seed(13);
  const auto opts = torch::TensorOptions().dtype(type_of(dtype)).device(torch::kCUDA, 0);
  const torch::Tensor a = torch::randn({m, k}, opts), b = torch::randn({k, n}, opts);
  torch::Tensor c = torch::full({m, n}, -7.0, opts);
  torch::cuda::synchronize(0);  // GPU 0, where a, b and c live
  LtGemm g(0, m, n, k, dtype);
  EXPECT_GT(g.run_ms(a.data_ptr(), b.data_ptr(), c.data_ptr()), 0.0);
  EXPECT_NE(g.algorithm().find("cuBLASLt algo"), std::string::npos);
  at::globalContext().setAllowTF32CuBLAS(dtype == "tf32");
  const torch::Tensor want = torch::mm(a, b);
  at::globalContext().setAllowTF32CuBLAS(false);
  const torch::Tensor exact = torch::mm(a.to(torch::kDouble).cpu(), b.to(torch::kDouble).cpu());
  EXPECT_LT(relative_error(c, want), tolerance) << dtype << " against torch::mm";
  EXPECT_LT(relative_error(c, exact), tolerance) << dtype << " against the float64 product";
}

// Tolerances: a few units of the dtype's rounding (fp32 2^-24, TF32 and fp16 inputs 2^-11,
// bf16 2^-8) on sums of 64 products.
INSTANTIATE_TEST_SUITE_P(Dtypes, CublasLtGemm,
                         ::testing::Values(std::make_pair(std::string("float32"), 1e-5),
                                           std::make_pair(std::string("tf32"), 1e-2),
                                           std::make_pair(std::string("float16"), 1e-2),
                                           std::make_pair(std::string("bfloat16"), 4e-2)),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace dtune::probe
