// The probes that need a GPU: device STREAM, host<->device copies (pinned and pageable), GPU×GPU
// copies (peer access on and off) and launch overhead. Two implementations:
// device_probes_cuda.cc when built with CUDA, device_probes_none.cc otherwise (no GPUs).
#pragma once

#include <cstdint>
#include <vector>

#include "benchmarks/probe/probe_results.h"
#include "core/context.h"

namespace dtune::probe {

// CUDA devices this process sees (0 without CUDA or a driver). Never throws.
int visible_gpus();

// Collective over ctx; every rank measures on GPU local_rank % visible_gpus().
MemoryRecord device_stream(const RunContext& ctx, int64_t iters);

struct CopyOptions {
  int64_t min_bytes = 4 << 10, max_bytes = 1LL << 30;
  double factor = 4;
  int64_t iters = 10;
};
std::vector<CopyRecord> run_copy(const RunContext& ctx, const CopyOptions& o);
// Rank 0 only, over the GPUs it sees: with and without peer access.
std::vector<P2pRecord> run_p2p(int64_t size_bytes, int64_t iters);
LaunchRecord run_launch(const RunContext& ctx, int64_t iters);

}  // namespace dtune::probe
