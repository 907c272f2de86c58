// Micro-benchmarks: the statistics every table prints (core/stats.h): summary and percentiles over
// a run's iterations, and the alpha-beta fit over a size sweep.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "core/stats.h"

namespace {

std::vector<double> times_us(size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 100.0 + 10.0 * std::sin(static_cast<double>(i));
  return v;
}

void BM_Summarize(benchmark::State& state) {
  const std::vector<double> v = times_us(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(dtune::summarize(v));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Summarize)->Arg(20)->Arg(1000)->Arg(100000);

void BM_FitAlphaBeta(benchmark::State& state) {
  // nccl-tests' default sweep: 8 B to 128 MiB by 2 (25 sizes), t = 5 us + S / 20 GB/s.
  std::vector<double> bytes, us;
  for (double s = 8; s <= 128.0 * (1 << 20); s *= 2) {
    bytes.push_back(s);
    us.push_back(5.0 + s / 20e3);
  }
  for (auto _ : state) benchmark::DoNotOptimize(dtune::fit_alpha_beta(bytes, us));
}
BENCHMARK(BM_FitAlphaBeta);

}  // namespace
