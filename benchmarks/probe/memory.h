// The memory probe: STREAM copy/scale/add/triad (kernels/stream.h) on the host with --threads
// OpenMP threads, arrays sized well past the last-level cache (STREAM's rule: each array at
// least 4× the caches), and on the rank's GPU when there is one. STREAM's figure is the best
// iteration after the first; the median is recorded beside it.
#pragma once

#include <cstdint>
#include <vector>

#include "benchmarks/probe/probe_results.h"
#include "core/context.h"
#include "core/topology.h"

namespace dtune::probe {

struct MemoryOptions {
  int64_t array_bytes = 0;  // one array; 0: max(4 × the machine's caches, 64 MiB)
  int threads = 0;          // 0: OpenMP's default (the cores)
  int64_t iters = 20;
  bool host = true, device = true;
};

// Default array size for a machine: 4 × the sum of every cache, at least 64 MiB, in whole MiB.
int64_t default_array_bytes(const Topology& t);
// Puts the STREAM samples `gbps` ([K] kernels × iterations, in kStreamKernels' order) into r:
// kernel names, then every rank's best and median per kernel (collective over ctx; rank 0 holds
// all of them), host or device alike.
void summarise_stream(const RunContext& ctx, const std::vector<std::vector<double>>& gbps,
                      MemoryRecord& r);
// Collective over ctx: every rank measures; rank 0 holds every rank's numbers.
std::vector<MemoryRecord> run_memory(const RunContext& ctx, const MemoryOptions& o);

}  // namespace dtune::probe
