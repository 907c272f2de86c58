// How much host memory a run may still take, for refusing an impossible size before allocating it
// (one clear line instead of std::bad_alloc or the kernel's OOM killer).
#pragma once

#include <cstdint>
#include <string>

namespace dtune {

// MemAvailable from /proc/meminfo in bytes (the kernel's estimate of what can be allocated without
// swapping), or 0 when it cannot be read.
uint64_t host_memory_available_bytes();

// "1.5 GiB", "512 MiB", "12 KiB", "100 B".
std::string format_bytes(uint64_t bytes);

// The one check every binary makes before a large host allocation: throws UsageError (exit 2, one
// line) when `ranks_on_node` ranks that each need `per_rank_bytes` would need more than the node's
// MemAvailable, instead of std::bad_alloc or the kernel's OOM killer (exit 137, no message) later:
// "<what> needs 48.0 GiB of host memory per rank (48.0 GiB for the 1 ranks on HOST), but 22.1 GiB
// is available there: <fix>". An unknown MemAvailable (0) passes. Ranks of different nodes may
// disagree; run_main then aborts the job with the refusing rank's line.
void refuse_unless_host_fits(uint64_t per_rank_bytes, int ranks_on_node, const std::string& host,
                             const std::string& what, const std::string& fix);

}  // namespace dtune
