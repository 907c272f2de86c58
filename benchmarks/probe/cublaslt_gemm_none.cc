// cuBLASLt products without CUDA (see cublaslt_gemm.h): nothing to run; the gemm probe measures
// torch::mm alone.
#include "benchmarks/probe/cublaslt_gemm.h"
#include "core/error.h"

namespace dtune::probe {

struct LtGemm::Impl {};

bool cublaslt_available() { return false; }

LtGemm::LtGemm(int, int64_t, int64_t, int64_t, const std::string&, size_t) {
  throw Error("cuBLASLt gemm: dtune was built without CUDA");
}
LtGemm::~LtGemm() = default;
LtGemm::LtGemm(LtGemm&&) noexcept = default;
LtGemm& LtGemm::operator=(LtGemm&&) noexcept = default;
double LtGemm::run_ms(const void*, const void*, void*) { return 0; }
std::string LtGemm::algorithm() const { return ""; }
size_t LtGemm::workspace_bytes() const { return 0; }

}  // namespace dtune::probe
