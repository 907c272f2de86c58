// Printing and HDF5 writing of the probes' records (see probe_results.h).
#include "benchmarks/probe/probe_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/cli.h"
#include "core/h5.h"

namespace dtune::probe {

size_t GemmRecord::best_shape() const {
  size_t best = 0;
  for (size_t s = 1; s < m.size(); ++s)
    if (tflops_median[s] > tflops_median[best]) best = s;
  return best;
}

void print_gemm(const GemmRecord& r) {
  std::printf("# gemm on %s, %s via %s, %d threads (rank 0)\n", r.device_name.c_str(),
              r.dtype.c_str(), r.library.c_str(), r.threads);
  std::printf("# %6s %6s %6s %14s %14s\n", "m", "n", "k", "TFLOP/s p50", "TFLOP/s best");
  for (size_t s = 0; s < r.m.size(); ++s)
    std::printf("  %6lld %6lld %6lld %14.4f %14.4f%s%s\n", static_cast<long long>(r.m[s]),
                static_cast<long long>(r.n[s]), static_cast<long long>(r.k[s]), r.tflops_median[s],
                r.tflops_best[s], s < r.algorithm.size() ? "  # " : "",
                s < r.algorithm.size() ? r.algorithm[s].c_str() : "");
  if (!r.m.empty()) {
    const size_t b = r.best_shape();
    std::printf("# peak %s %s: %.4f TFLOP/s at %lldx%lldx%lld\n", r.device.c_str(), r.dtype.c_str(),
                r.peak_tflops(), static_cast<long long>(r.m[b]), static_cast<long long>(r.n[b]),
                static_cast<long long>(r.k[b]));
  }
}

void print_memory(const MemoryRecord& r) {
  std::printf("# STREAM on %s, %d threads, 3 arrays of %s, %lld iterations (rank 0)\n",
              r.device_name.c_str(), r.threads,
              format_size(static_cast<uint64_t>(r.array_bytes)).c_str(),
              static_cast<long long>(r.iters));
  std::printf("# %-8s %12s %12s\n", "kernel", "GB/s best", "GB/s p50");
  for (size_t k = 0; k < r.kernel.size(); ++k)
    std::printf("  %-8s %12.2f %12.2f\n", r.kernel[k].c_str(), r.gbps_best[k], r.gbps_median[k]);
}

void print_copy(const CopyRecord& r) {
  std::printf("# copy %s, %s host memory, %s (rank 0)\n", r.direction.c_str(), r.memory.c_str(),
              r.device_name.c_str());
  std::printf("# %12s %12s %10s\n", "size", "time_us", "GB/s");
  for (size_t s = 0; s < r.size_bytes.size(); ++s)
    std::printf("  %12s %12.2f %10.2f\n",
                format_size(static_cast<uint64_t>(r.size_bytes[s])).c_str(), r.time_us[s],
                r.gbps[s]);
}

void print_p2p(const P2pRecord& r) {
  const size_t g = r.gpus.size();
  std::printf("# p2p copy bandwidth GB/s (%s each), peer access %s; row = source\n",
              format_size(static_cast<uint64_t>(r.size_bytes)).c_str(),
              r.peer_access ? "on" : "off");
  for (size_t i = 0; i < g; ++i) {
    std::printf("  GPU%-3zu", i);
    for (size_t j = 0; j < g; ++j) std::printf(" %8.2f", r.gbps[i * g + j]);
    std::printf("\n");
  }
}

void print_launch(const LaunchRecord& r) {
  std::printf("# launch on %s: empty kernel %.2f us, launch + sync %.2f us, event %.2f us\n",
              r.device_name.c_str(), r.launch_us, r.launch_sync_us, r.event_us);
}

namespace {
h5::Handle probe_group(ResultsFile& f, const std::string& probe, const std::string& description) {
  h5::Handle g = f.new_run(description);
  h5::write_attr(g.get(), "benchmark", "probe");
  h5::write_attr(g.get(), "probe", probe);
  h5::write_attr(g.get(), "status", "ok");
  return g;
}
void done(ResultsFile& f, h5::Handle& g) {
  g.close();
  f.flush();
}
}  // namespace

void write_gemm(ResultsFile& f, const GemmRecord& r) {
  const bool lt = r.library == "cublaslt";
  h5::Handle g =
      probe_group(f, "gemm", "gemm-" + r.device + "-" + r.dtype + (lt ? "-cublaslt" : ""));
  const hid_t id = g.get();
  h5::write_attr(id, "device", r.device);
  h5::write_attr(id, "device_name", r.device_name);
  h5::write_attr(id, "dtype", r.dtype);
  h5::write_attr(id, "library", r.library);
  h5::write_attr(id, "threads", r.threads);
  h5::write_attr(id, "min_iters", r.min_iters);
  h5::write_attr(id, "min_time_s", r.min_time_s);
  h5::write_attr(id, "world_size", static_cast<int64_t>(r.ranks));
  h5::write_attr(id, "peak_tflops", r.peak_tflops());
  const size_t S = r.m.size(), b = S ? r.best_shape() : 0;
  h5::write_attr(
      id, "peak_shape",
      S ? std::to_string(r.m[b]) + "x" + std::to_string(r.n[b]) + "x" + std::to_string(r.k[b])
        : std::string());
  h5::write_dataset(id, "m", {S}, r.m.data());
  h5::write_dataset(id, "n", {S}, r.n.data());
  h5::write_dataset(id, "k", {S}, r.k.data());
  h5::write_dataset(id, "tflops", {r.ranks, S}, r.tflops_median.data());
  h5::write_dataset(id, "tflops_best", {r.ranks, S}, r.tflops_best.data());
  h5::write_attr(id, "workspace_bytes", r.workspace_bytes);
  // --max-seconds: the shapes not started (the peak is then the largest measured shape's).
  h5::write_attr(id, "max_seconds", r.max_seconds);
  h5::write_attr(id, "stopped_by_max_seconds",
                 static_cast<int64_t>(r.not_measured.empty() ? 0 : 1));
  h5::write_strings(id, "shapes_not_measured", r.not_measured);
  if (lt) h5::write_strings(id, "algorithm", r.algorithm);
  done(f, g);
}

void write_memory(ResultsFile& f, const MemoryRecord& r) {
  h5::Handle g = probe_group(f, "memory", "memory-" + r.device);
  const hid_t id = g.get();
  h5::write_attr(id, "device", r.device);
  h5::write_attr(id, "device_name", r.device_name);
  h5::write_attr(id, "threads", r.threads);
  h5::write_attr(id, "array_bytes", r.array_bytes);
  h5::write_attr(id, "iters", r.iters);
  h5::write_attr(id, "world_size", static_cast<int64_t>(r.ranks));
  const size_t K = r.kernel.size();
  for (size_t k = 0; k < K; ++k)
    h5::write_attr(id, r.kernel[k] + "_gbps", r.gbps_best[k]);  // rank 0's STREAM figure
  h5::write_strings(id, "kernel", r.kernel);
  h5::write_dataset(id, "gbps", {r.ranks, K}, r.gbps_best.data());
  h5::write_dataset(id, "gbps_median", {r.ranks, K}, r.gbps_median.data());
  done(f, g);
}

void write_copy(ResultsFile& f, const CopyRecord& r) {
  h5::Handle g = probe_group(f, "copy", "copy-" + r.direction + "-" + r.memory);
  const hid_t id = g.get();
  h5::write_attr(id, "direction", r.direction);
  h5::write_attr(id, "memory", r.memory);
  h5::write_attr(id, "device_name", r.device_name);
  h5::write_attr(id, "world_size", static_cast<int64_t>(r.ranks));
  const size_t S = r.size_bytes.size();
  h5::write_dataset(id, "size_bytes", {S}, r.size_bytes.data());
  h5::write_dataset(id, "gbps", {r.ranks, S}, r.gbps.data());
  h5::write_dataset(id, "time_us", {r.ranks, S}, r.time_us.data());
  done(f, g);
}

void write_p2p(ResultsFile& f, const P2pRecord& r) {
  h5::Handle g = probe_group(f, "p2p", std::string("p2p-peer-") + (r.peer_access ? "on" : "off"));
  const hid_t id = g.get();
  h5::write_attr(id, "peer_access", static_cast<int64_t>(r.peer_access));
  h5::write_attr(id, "size_bytes", r.size_bytes);
  const size_t G = r.gpus.size();
  h5::write_strings(id, "gpu", r.gpus);
  h5::write_dataset(id, "gbps", {G, G}, r.gbps.data());
  h5::write_dataset(id, "latency_us", {G, G}, r.latency_us.data());
  done(f, g);
}

void write_launch(ResultsFile& f, const LaunchRecord& r) {
  h5::Handle g = probe_group(f, "launch", "launch");
  const hid_t id = g.get();
  h5::write_attr(id, "device_name", r.device_name);
  h5::write_attr(id, "launch_us", r.launch_us);
  h5::write_attr(id, "launch_sync_us", r.launch_sync_us);
  h5::write_attr(id, "event_us", r.event_us);
  h5::write_attr(id, "iters", r.iters);
  done(f, g);
}

void write_topology_run(ResultsFile& f, const Topology& t) {
  h5::Handle g = probe_group(f, "topology", "topology");
  write_topology(g.get(), "topology", t);
  h5::write_attr(g.get(), "summary", t.summary());
  done(f, g);
}

}  // namespace dtune::probe
