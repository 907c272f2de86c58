// Micro-benchmarks: gradient buckets. Planning them (train/grad_sync.h), and filling them from
// ResNet-50's 161 gradients: the fused pack (kernels/bucket_pack.h, one pass per bucket with the
// 1/world scale) against what grad_sync did before it (per parameter, mul by 1/world then copy_)
// and against a bare copy_ per parameter (no scale: the least the old way could cost).
#include <benchmark/benchmark.h>

#include <vector>

#include "models/registry.h"
#include "train/fused_pack.h"
#include "train/grad_sync.h"

namespace {

struct Grads {
  std::vector<torch::Tensor> grads;  // in parameter order
  std::vector<int64_t> bytes;
  dtune::train::BucketLayout layout;
  std::vector<torch::Tensor> flats;  // one per bucket, fp32
};

// ResNet-50's parameters (torchvision's shapes), random gradients, PyTorch DDP's buckets
// (25 MiB, first 1 MiB).
const Grads& resnet50() {
  static const Grads g = [] {
    Grads out;
    torch::NoGradGuard no_grad;
    auto model = dtune::models::make_model("resnet50", {});
    for (const auto& p : model->parameters()) {
      out.grads.push_back(torch::randn_like(p));
      out.bytes.push_back(p.numel() * 4);
    }
    out.layout = dtune::train::plan_buckets(out.bytes, 1 << 20, 25 << 20);
    for (int64_t b : out.layout.bytes) out.flats.push_back(torch::empty({b / 4}));
    return out;
  }();
  return g;
}

void BM_PlanBuckets(benchmark::State& state) {
  const Grads& g = resnet50();
  for (auto _ : state)
    benchmark::DoNotOptimize(dtune::train::plan_buckets(g.bytes, 1 << 20, 25 << 20));
  state.counters["tensors"] = static_cast<double>(g.bytes.size());
}
BENCHMARK(BM_PlanBuckets);

void set_bytes(benchmark::State& state, const Grads& g) {
  int64_t total = 0;
  for (int64_t b : g.bytes) total += b;
  state.SetBytesProcessed(state.iterations() * total);  // gradient bytes packed per iteration
  state.counters["tensors"] = static_cast<double>(g.grads.size());
  state.counters["buckets"] = static_cast<double>(g.layout.params.size());
}

// The fused pack: one call per bucket.
void BM_PackResNet50Fused(benchmark::State& state) {
  const Grads& g = resnet50();
  const float scale = 0.5f;
  for (auto _ : state) {
    for (size_t b = 0; b < g.layout.params.size(); ++b) {
      std::vector<torch::Tensor> in;
      for (size_t i : g.layout.params[b]) in.push_back(g.grads[i]);
      if (!dtune::train::fused_pack(in, g.flats[b], scale))
        state.SkipWithError("fused_pack refused");
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, g);
}
BENCHMARK(BM_PackResNet50Fused)->Unit(benchmark::kMillisecond)->UseRealTime();

// One copy_ per parameter into its bucket's flat view, scaled by 1/world first when `scale`.
void pack_per_param(benchmark::State& state, bool scale) {
  const Grads& g = resnet50();
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    for (size_t b = 0; b < g.layout.params.size(); ++b) {
      int64_t at = 0;
      for (size_t i : g.layout.params[b]) {
        const int64_t n = g.grads[i].numel();
        const torch::Tensor flat = g.grads[i].reshape({-1});
        g.flats[b].narrow(0, at, n).copy_(scale ? flat.mul(0.5) : flat);
        at += n;
      }
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, g);
}

// grad_sync before the fused pack: view.copy_(grad.reshape(-1).mul(1/world)) per parameter.
void BM_PackResNet50MulCopyPerParam(benchmark::State& state) { pack_per_param(state, true); }
BENCHMARK(BM_PackResNet50MulCopyPerParam)->Unit(benchmark::kMillisecond)->UseRealTime();

// One bare copy_ per parameter (no scaling).
void BM_PackResNet50CopyPerParam(benchmark::State& state) { pack_per_param(state, false); }
BENCHMARK(BM_PackResNet50CopyPerParam)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
