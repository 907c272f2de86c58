// The device probes with CUDA (see device_probes.h). Times are CUDA events around each operation
// on a stream of its own; bandwidth GB/s = bytes / time / 1e9. Pinned host memory is
// cudaMallocHost; pageable is plain malloc, which the driver stages through its own pinned buffer.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "benchmarks/probe/device_probes.h"
#include "benchmarks/probe/memory.h"
#include "core/cuda/cuda_error.h"
#include "core/device_info.h"
#include "core/gather.h"
#include "core/stats.h"
#include "kernels/empty_kernel.h"
#include "kernels/stream_cuda.h"

namespace dtune::probe {
namespace {

int use_device(const RunContext& ctx) {
  const int n = visible_gpus();
  const int d = ctx.local_rank() % std::max(n, 1);
  DTUNE_CUDA_CHECK(cudaSetDevice(d));
  return d;
}

// A stream and two events, destroyed on scope exit.
struct Timing {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  Timing() {
    DTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    DTUNE_CUDA_CHECK(cudaEventCreate(&start));
    DTUNE_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Timing() {
    DTUNE_CUDA_WARN(cudaEventDestroy(start));
    DTUNE_CUDA_WARN(cudaEventDestroy(stop));
    DTUNE_CUDA_WARN(cudaStreamDestroy(stream));
  }
  Timing(const Timing&) = delete;
  Timing& operator=(const Timing&) = delete;
  template <class F>
  double ms(F&& op) {
    DTUNE_CUDA_CHECK(cudaEventRecord(start, stream));
    op();
    DTUNE_CUDA_CHECK(cudaEventRecord(stop, stream));
    DTUNE_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    DTUNE_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    return t;
  }
};

struct DeviceFree {
  void operator()(void* p) const noexcept { DTUNE_CUDA_WARN(cudaFree(p)); }
};
struct HostFree {
  void operator()(void* p) const noexcept { DTUNE_CUDA_WARN(cudaFreeHost(p)); }
};
struct PlainFree {
  void operator()(void* p) const noexcept { std::free(p); }
};

}  // namespace

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

MemoryRecord device_stream(const RunContext& ctx, int64_t iters) {
  const int d = use_device(ctx);
  size_t free_bytes = 0, total = 0;
  DTUNE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  // Three arrays of up to 1 GiB each, well past any L2, within a quarter of free memory.
  const size_t n = std::min<size_t>(1ULL << 27, free_bytes / 4 / 3 / sizeof(double));
  kernels::DeviceStream s(n);
  MemoryRecord r;
  r.device = "cuda";
  r.device_name = describe_device(d);
  r.array_bytes = static_cast<int64_t>(n * sizeof(double));
  r.iters = iters;
  std::vector<std::vector<double>> gbps(kernels::kStreamKernels.size());
  for (int64_t it = 0; it <= iters; ++it)
    for (size_t k = 0; k < gbps.size(); ++k) {
      const double ms = s.run_ms(kernels::kStreamKernels[k]);
      if (it > 0) gbps[k].push_back(kernels::stream_gbps(kernels::kStreamKernels[k], n, ms / 1e3));
    }
  summarise_stream(ctx, gbps, r);
  return r;
}

std::vector<CopyRecord> run_copy(const RunContext& ctx, const CopyOptions& o) {
  const int d = use_device(ctx);
  const size_t max = static_cast<size_t>(o.max_bytes);
  void* raw = nullptr;
  DTUNE_CUDA_CHECK(cudaMalloc(&raw, max));
  std::unique_ptr<void, DeviceFree> dev(raw);
  DTUNE_CUDA_CHECK(cudaMallocHost(&raw, max));
  std::unique_ptr<void, HostFree> pinned(raw);
  std::unique_ptr<void, PlainFree> pageable(std::malloc(max));
  if (!pageable)
    throw Error("copy: cannot allocate " + std::to_string(max) + " bytes of host memory");
  std::memset(pageable.get(), 1, max);
  std::memset(pinned.get(), 1, max);
  Timing timing;
  std::vector<CopyRecord> out;
  for (const char* direction : {"h2d", "d2h"}) {
    for (const char* memory : {"pinned", "pageable"}) {
      CopyRecord r;
      r.direction = direction;
      r.memory = memory;
      r.device_name = describe_device(d);
      void* host = std::string(memory) == "pinned" ? pinned.get() : pageable.get();
      const bool h2d = std::string(direction) == "h2d";
      std::vector<double> us, gbps;
      for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes);
           b *= o.factor) {
        const size_t bytes = static_cast<size_t>(b);
        std::vector<double> t;
        for (int64_t it = 0; it <= o.iters; ++it) {
          const double ms = timing.ms([&] {
            DTUNE_CUDA_CHECK(cudaMemcpyAsync(h2d ? dev.get() : host, h2d ? host : dev.get(), bytes,
                                             h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                             timing.stream));
          });
          if (it > 0) t.push_back(ms * 1e3);
        }
        r.size_bytes.push_back(static_cast<int64_t>(bytes));
        us.push_back(percentile(t, 50));
        gbps.push_back(static_cast<double>(bytes) / (us.back() / 1e6) / 1e9);
      }
      r.time_us = gather_doubles(ctx.comm(), us);
      r.gbps = gather_doubles(ctx.comm(), gbps);
      r.ranks = static_cast<size_t>(ctx.world_size());
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<P2pRecord> run_p2p(int64_t size_bytes, int64_t iters) {
  const int g = visible_gpus();
  std::vector<std::unique_ptr<void, DeviceFree>> buf;
  for (int i = 0; i < g; ++i) {
    void* p = nullptr;
    DTUNE_CUDA_CHECK(cudaSetDevice(i));
    DTUNE_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(size_bytes)));
    buf.emplace_back(p);
  }
  std::vector<P2pRecord> out;
  for (bool peer : {true, false}) {
    P2pRecord r;
    r.peer_access = peer;
    r.size_bytes = size_bytes;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    r.gbps.assign(static_cast<size_t>(g * g), nan);
    r.latency_us.assign(static_cast<size_t>(g * g), nan);
    for (int i = 0; i < g; ++i) r.gpus.push_back(describe_device(i));
    for (int src = 0; src < g; ++src) {
      for (int dst = 0; dst < g; ++dst) {
        if (src == dst) continue;
        int can = 0;
        DTUNE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dst, src));
        if (peer && !can) continue;
        DTUNE_CUDA_CHECK(cudaSetDevice(dst));
        if (peer) {
          const cudaError_t e = cudaDeviceEnablePeerAccess(src, 0);
          if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) DTUNE_CUDA_CHECK(e);
          (void)cudaGetLastError();
        } else if (can) {
          // Off in both directions: the peer pass enabled src's access to dst too (as the pair
          // (dst, src)), and a copy may use either device's mapping of the other.
          for (const auto [from, to] : {std::pair{dst, src}, std::pair{src, dst}}) {
            DTUNE_CUDA_CHECK(cudaSetDevice(from));
            const cudaError_t e = cudaDeviceDisablePeerAccess(to);
            if (e != cudaSuccess && e != cudaErrorPeerAccessNotEnabled) DTUNE_CUDA_CHECK(e);
            (void)cudaGetLastError();
          }
          DTUNE_CUDA_CHECK(cudaSetDevice(dst));
        }
        Timing timing;
        std::vector<double> big, small;
        for (int64_t it = 0; it <= iters; ++it) {
          const double ms = timing.ms([&] {
            DTUNE_CUDA_CHECK(cudaMemcpyPeerAsync(buf[dst].get(), dst, buf[src].get(), src,
                                                 static_cast<size_t>(size_bytes), timing.stream));
          });
          const double ms_small = timing.ms([&] {
            DTUNE_CUDA_CHECK(
                cudaMemcpyPeerAsync(buf[dst].get(), dst, buf[src].get(), src, 4, timing.stream));
          });
          if (it > 0) {
            big.push_back(ms);
            small.push_back(ms_small * 1e3);
          }
        }
        const size_t at = static_cast<size_t>(src * g + dst);
        r.gbps[at] = static_cast<double>(size_bytes) / (percentile(big, 50) / 1e3) / 1e9;
        r.latency_us[at] = percentile(small, 50);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

LaunchRecord run_launch(const RunContext& ctx, int64_t iters) {
  const int d = use_device(ctx);
  Timing timing;
  std::vector<double> launch, launch_sync, event;
  using clock = std::chrono::steady_clock;
  auto us_since = [](clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock::now() - t0).count();
  };
  for (int64_t it = 0; it <= iters; ++it) {
    auto t0 = clock::now();
    kernels::launch_empty_kernel(timing.stream);
    const double l = us_since(t0);
    DTUNE_CUDA_CHECK(cudaStreamSynchronize(timing.stream));
    t0 = clock::now();
    kernels::launch_empty_kernel(timing.stream);
    DTUNE_CUDA_CHECK(cudaStreamSynchronize(timing.stream));
    const double ls = us_since(t0);
    t0 = clock::now();
    DTUNE_CUDA_CHECK(cudaEventRecord(timing.start, timing.stream));
    (void)cudaEventQuery(timing.start);
    const double ev = us_since(t0);
    DTUNE_CUDA_CHECK(cudaStreamSynchronize(timing.stream));
    if (it > 0) {
      launch.push_back(l);
      launch_sync.push_back(ls);
      event.push_back(ev);
    }
  }
  LaunchRecord r;
  r.device_name = describe_device(d);
  r.launch_us = percentile(launch, 50);
  r.launch_sync_us = percentile(launch_sync, 50);
  r.event_us = percentile(event, 50);
  r.iters = iters;
  return r;
}

}  // namespace dtune::probe
