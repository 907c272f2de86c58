// The gemm probe (see gemm.h).
#include "benchmarks/probe/gemm.h"

#include <ATen/Context.h>
#include <mpi.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>

#include "benchmarks/probe/cublaslt_gemm.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/gather.h"
#include "core/host_memory.h"
#include "core/stats.h"
#include "train/device_timeline.h"

namespace dtune::probe {
namespace {

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> parse_shapes(const std::vector<std::string>& text, bool cuda) {
  std::vector<Shape> out;
  if (text.empty()) {
    const std::vector<int64_t> square = cuda ? std::vector<int64_t>{1024, 2048, 4096, 8192}
                                             : std::vector<int64_t>{256, 512, 1024, 2048};
    for (int64_t s : square) out.push_back({s, s, s});
    return out;
  }
  for (const auto& t : text) {
    std::vector<int64_t> v;
    size_t at = 0;
    try {
      while (at <= t.size()) {
        const size_t x = t.find('x', at);
        v.push_back(std::stoll(t.substr(at, x == std::string::npos ? std::string::npos : x - at)));
        if (x == std::string::npos) break;
        at = x + 1;
      }
    } catch (const std::exception&) {
      v.clear();
    }
    const bool ok = (v.size() == 1 || v.size() == 3) &&
                    std::all_of(v.begin(), v.end(), [](int64_t d) { return d > 0 && d <= 65536; });
    if (!ok) throw UsageError("--shapes: '" + t + "' is not N or MxNxK with sizes from 1 to 65536");
    out.push_back(v.size() == 1 ? Shape{v[0], v[0], v[0]} : Shape{v[0], v[1], v[2]});
  }
  return out;
}

torch::ScalarType scalar_type_of(const std::string& dtype) {
  if (dtype == "float16") return torch::kHalf;
  if (dtype == "bfloat16") return torch::kBFloat16;
  return torch::kFloat;  // float32 and tf32
}

// Waits for the work queued on GPU `ordinal` (the rank's, never the current device's by default:
// torch::cuda::synchronize() without an index is GPU 0's on a thread that never set one).
void synchronize(int ordinal) {
  if (ordinal >= 0) torch::cuda::synchronize(ordinal);
}

// Each product timed alone, between two marks of the device's timeline (CUDA events on torch's
// stream of the rank's GPU, as cuBLASLt's below on its own stream): TFLOP/s per iteration.
std::vector<double> time_shape(const Shape& s, const std::string& dtype, const torch::Device& dev,
                               const GemmOptions& o) {
  const int ordinal = dev.is_cuda() ? dev.index() : -1;
  const auto opts = torch::TensorOptions().dtype(scalar_type_of(dtype)).device(dev);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({s.m, s.k}, opts), b = torch::randn({s.k, s.n}, opts);
  torch::Tensor c = torch::empty({s.m, s.n}, opts);
  for (int64_t i = 0; i < o.warmup; ++i) torch::mm_out(c, a, b);
  synchronize(ordinal);
  const auto timeline = train::make_timeline(ordinal);
  const double flops =
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  std::vector<double> tflops;
  double spent = 0;
  while (static_cast<int64_t>(tflops.size()) < o.min_iters || spent < o.min_time_s) {
    timeline->begin();
    torch::mm_out(c, a, b);
    timeline->mark();
    const double sec = timeline->read_ms().back() / 1e3;
    spent += sec;
    tflops.push_back(flops / sec / 1e12);
    if (tflops.size() >= 100000) break;
  }
  return tflops;
}

// The same through cuBLASLt on GPU `ordinal`, each product timed with CUDA events; `algorithm`
// gets what the heuristic chose.
std::vector<double> time_shape_lt(const Shape& s, const std::string& dtype, int ordinal,
                                  const GemmOptions& o, std::string* algorithm) {
  const auto opts = torch::TensorOptions()
                        .dtype(scalar_type_of(dtype))
                        .device(torch::Device(torch::kCUDA, static_cast<int8_t>(ordinal)));
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({s.m, s.k}, opts), b = torch::randn({s.k, s.n}, opts);
  torch::Tensor c = torch::empty({s.m, s.n}, opts);
  synchronize(ordinal);  // LtGemm's stream does not wait for torch's randn
  LtGemm g(ordinal, s.m, s.n, s.k, dtype);
  *algorithm = g.algorithm();
  for (int64_t i = 0; i < o.warmup; ++i) g.run_ms(a.data_ptr(), b.data_ptr(), c.data_ptr());
  const double flops =
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  std::vector<double> tflops;
  double spent = 0;
  while (static_cast<int64_t>(tflops.size()) < o.min_iters || spent < o.min_time_s) {
    const double ms = g.run_ms(a.data_ptr(), b.data_ptr(), c.data_ptr());
    spent += ms / 1e3;
    tflops.push_back(flops / (ms / 1e3) / 1e12);
    if (tflops.size() >= 100000) break;
  }
  return tflops;
}

// One dtype through one library over the shapes; every rank measures, rank 0 gathers.
GemmRecord run_library(const RunContext& ctx, const GemmOptions& o,
                       const std::vector<Shape>& shapes, const std::string& dtype,
                       const std::string& library, const torch::Device& dev, int ordinal) {
  const bool cuda = dev.is_cuda(), lt = library == "cublaslt";
  // TF32 is a cuBLAS mode of fp32 products: on for "tf32" only.
  at::globalContext().setAllowTF32CuBLAS(dtype == "tf32");
  GemmRecord r;
  r.device = cuda ? "cuda" : "cpu";
  r.device_name = cuda ? describe_device(ordinal) : "cpu";
  r.dtype = dtype;
  r.library = library;
  r.threads = cuda ? 0 : torch::get_num_threads();
  r.min_iters = o.min_iters;
  r.min_time_s = o.min_time_s;
  r.workspace_bytes = lt ? static_cast<int64_t>(kLtWorkspaceBytes) : 0;
  r.max_seconds = o.max_seconds;
  std::vector<double> median, best;
  // The --max-seconds budget and the progress lines are wall time, not a measurement.
  using Wall = std::chrono::steady_clock;
  const auto seconds_since = [](Wall::time_point t) {
    return std::chrono::duration<double>(Wall::now() - t).count();  // host clock: wall time
  };
  const Wall::time_point start = Wall::now();  // host clock: the budget's start
  double last_s = 0, last_flops = 0;           // the previous shape's seconds and FLOPs per product
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const double flops =
        2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const double elapsed = seconds_since(start);
    // The next shape costs about the last one's time scaled by its FLOPs (products at least
    // --min-iters + warm-up, or --min-time): every rank must agree to go on, or the gather below
    // would pair different shapes.
    const double predicted = i == 0 ? 0 : last_s * flops / last_flops;
    int go = o.max_seconds <= 0 || elapsed + predicted <= o.max_seconds ? 1 : 0;
    DTUNE_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &go, 1, MPI_INT, MPI_MIN, ctx.comm()));
    if (!go) {
      for (size_t j = i; j < shapes.size(); ++j)
        r.not_measured.push_back(std::to_string(shapes[j].m) + "x" + std::to_string(shapes[j].n) +
                                 "x" + std::to_string(shapes[j].k));
      if (o.progress && ctx.is_root())
        std::printf(
            "# gemm %s %s: %s not measured: about %.0f s more would pass --max-seconds %g "
            "(%.0f s spent); the peak is the largest shape measured\n",
            dtype.c_str(), library.c_str(), r.not_measured.front().c_str(), predicted,
            o.max_seconds, elapsed);
      break;
    }
    const Wall::time_point shape_start = Wall::now();  // host clock: for the next estimate
    std::string algorithm;
    const std::vector<double> t =
        lt ? time_shape_lt(s, dtype, ordinal, o, &algorithm) : time_shape(s, dtype, dev, o);
    last_s = seconds_since(shape_start);
    last_flops = flops;
    if (o.progress && ctx.is_root()) {
      std::printf(
          "# gemm %s %s %lldx%lldx%lld: %.4g TFLOP/s (median of %zu, %.1f s; %.0f s in "
          "all)\n",
          dtype.c_str(), library.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
          static_cast<long long>(s.k), percentile(t, 50), t.size(), last_s, elapsed + last_s);
      std::fflush(stdout);
    }
    if (lt) r.algorithm.push_back(algorithm);
    median.push_back(percentile(t, 50));
    best.push_back(*std::max_element(t.begin(), t.end()));
    r.m.push_back(s.m);
    r.n.push_back(s.n);
    r.k.push_back(s.k);
  }
  r.tflops_median = gather_doubles(ctx.comm(), median);
  r.tflops_best = gather_doubles(ctx.comm(), best);
  r.ranks = static_cast<size_t>(ctx.world_size());
  return r;
}

}  // namespace

std::vector<std::string> gemm_libraries(const GemmOptions& o, bool cuda) {
  if (o.libraries.empty())
    return cuda && cublaslt_available() ? std::vector<std::string>{"torch::mm", "cublaslt"}
                                        : std::vector<std::string>{"torch::mm"};
  std::vector<std::string> out;
  for (const auto& l : o.libraries) {
    const std::string c = l == "torch" ? "torch::mm" : l;
    if (c != "torch::mm" && c != "cublaslt")
      throw UsageError("--library: '" + l + "' is not one of torch, cublaslt");
    if (c == "cublaslt" && !(cuda && cublaslt_available()))
      throw UsageError(
          "--library cublaslt needs a GPU and a CUDA build (cuBLASLt); use torch on a CPU");
    out.push_back(c);
  }
  return out;
}

std::vector<std::string> gemm_dtypes(const GemmOptions& o, bool cuda) {
  if (o.dtypes.empty())
    return cuda ? std::vector<std::string>{"float32", "tf32", "float16", "bfloat16"}
                : std::vector<std::string>{"float32", "bfloat16"};
  std::vector<std::string> out;
  for (const auto& d : o.dtypes) {
    std::string c = d == "fp32"   ? "float32"
                    : d == "fp16" ? "float16"
                    : d == "bf16" ? "bfloat16"
                                  : d;
    if (c != "float32" && c != "tf32" && c != "float16" && c != "bfloat16")
      throw UsageError("--dtype: '" + d + "' is not one of fp32, tf32, fp16, bf16");
    if (c == "tf32" && !cuda)
      throw UsageError("--dtype tf32 needs a GPU (TF32 is a tensor-core mode); use fp32 on a CPU");
    out.push_back(c);
  }
  return out;
}

namespace {

// On a CPU the operands live in host memory: A (m, k), B (k, n) and C (m, n) of the largest
// shape and dtype, refused before torch allocates them (core/host_memory.h).
void refuse_unless_fits(const std::vector<Shape>& shapes, const std::vector<std::string>& dtypes,
                        const RunContext& ctx) {
  uint64_t need = 0;
  std::string largest;
  for (const auto& dtype : dtypes)
    for (const Shape& s : shapes) {
      const uint64_t element = torch::elementSize(scalar_type_of(dtype));
      const uint64_t bytes = element * static_cast<uint64_t>(s.m * s.k + s.k * s.n + s.m * s.n);
      if (bytes <= need) continue;
      need = bytes;
      largest = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                " in " + dtype;
    }
  refuse_unless_host_fits(need, ctx, "--shapes " + largest,
                          "give smaller --shapes (A, B and C of a shape are m·k + k·n + m·n "
                          "elements)");
}

}  // namespace

std::vector<GemmRecord> run_gemm(const RunContext& ctx, const GemmOptions& o) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (o.device == "cuda" && gpus == 0)
    throw UsageError("--device cuda: no CUDA device visible; use --device cpu");
  const bool cuda = o.device != "cpu" && gpus > 0;
  const int ordinal = cuda ? ctx.local_rank() % gpus : -1;
  const torch::Device dev =
      cuda ? torch::Device(torch::kCUDA, static_cast<int8_t>(ordinal)) : torch::Device(torch::kCPU);
  if (o.threads > 0) torch::set_num_threads(o.threads);
  const std::vector<Shape> shapes = parse_shapes(o.shapes, cuda);
  const std::vector<std::string> libraries = gemm_libraries(o, cuda);
  const std::vector<std::string> dtypes = gemm_dtypes(o, cuda);
  if (!cuda) refuse_unless_fits(shapes, dtypes, ctx);
  std::vector<GemmRecord> out;
  for (const auto& dtype : dtypes)
    for (const auto& library : libraries)
      out.push_back(run_library(ctx, o, shapes, dtype, library, dev, ordinal));
  at::globalContext().setAllowTF32CuBLAS(false);
  return out;
}

}  // namespace dtune::probe
