// The memory probe (see memory.h).
#include "benchmarks/probe/memory.h"

#include <algorithm>
#include <chrono>

#include "benchmarks/probe/device_probes.h"
#include "core/cli.h"
#include "core/gather.h"
#include "core/host_memory.h"
#include "core/stats.h"
#include "kernels/stream.h"

namespace dtune::probe {

int64_t default_array_bytes(const Topology& t) {
  int64_t caches = 0;
  for (const auto& c : t.caches) caches += c.size_bytes * c.count;
  const int64_t want = std::max<int64_t>(4 * caches, 64LL << 20);
  return (want + (1 << 20) - 1) / (1 << 20) * (1 << 20);
}

void summarise_stream(const RunContext& ctx, const std::vector<std::vector<double>>& gbps,
                      MemoryRecord& r) {
  std::vector<double> best, median;
  for (size_t k = 0; k < gbps.size(); ++k) {
    r.kernel.push_back(kernels::to_string(kernels::kStreamKernels[k]));
    best.push_back(*std::max_element(gbps[k].begin(), gbps[k].end()));
    median.push_back(percentile(gbps[k], 50));
  }
  r.gbps_best = gather_doubles(ctx.comm(), best);
  r.gbps_median = gather_doubles(ctx.comm(), median);
  r.ranks = static_cast<size_t>(ctx.world_size());
}

namespace {

MemoryRecord host_stream(const RunContext& ctx, const MemoryOptions& o, int64_t array_bytes) {
  kernels::HostStream s(static_cast<size_t>(array_bytes) / sizeof(double), o.threads);
  MemoryRecord r;
  r.device = "cpu";
  r.device_name = "cpu";
  r.threads = s.threads();
  r.array_bytes = static_cast<int64_t>(s.size() * sizeof(double));
  r.iters = o.iters;
  std::vector<std::vector<double>> gbps(kernels::kStreamKernels.size());
  // As STREAM: each iteration runs the four kernels in turn; the first iteration is not counted.
  for (int64_t it = 0; it <= o.iters; ++it) {
    for (size_t k = 0; k < kernels::kStreamKernels.size(); ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      s.run(kernels::kStreamKernels[k]);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (it > 0)
        gbps[k].push_back(kernels::stream_gbps(kernels::kStreamKernels[k], s.size(), sec));
    }
  }
  summarise_stream(ctx, gbps, r);
  return r;
}

}  // namespace

std::vector<MemoryRecord> run_memory(const RunContext& ctx, const MemoryOptions& o) {
  std::vector<MemoryRecord> out;
  const int64_t bytes = o.array_bytes > 0 ? o.array_bytes : default_array_bytes(detect_topology());
  // STREAM's three arrays (a, b, c), refused before they are allocated (core/host_memory.h).
  if (o.host) {
    refuse_unless_host_fits(
        3 * static_cast<uint64_t>(bytes), ctx,
        "--array-size " + format_size(static_cast<uint64_t>(bytes)) + " (3 arrays)",
        "lower --array-size");
    out.push_back(host_stream(ctx, o, bytes));
  }
  // Every rank must agree on whether the device part runs (it gathers): all ranks see GPUs, or
  // the part is left out everywhere.
  if (o.device) {
    const std::vector<long long> have = gather_longs(ctx.comm(), {visible_gpus() > 0 ? 1LL : 0LL});
    long long all = 1;
    if (ctx.is_root())
      for (long long h : have) all = std::min(all, h);
    std::vector<long long> verdict = {all};
    MPI_Bcast(verdict.data(), 1, MPI_LONG_LONG, 0, ctx.comm());
    if (verdict[0] == 1) out.push_back(device_stream(ctx, o.iters));
  }
  return out;
}

}  // namespace dtune::probe
