// How much host memory a run may still take, for refusing an impossible size before allocating it
// (one clear line instead of std::bad_alloc or the kernel's OOM killer).
#pragma once

#include <cstdint>
#include <string>

#include "core/context.h"

namespace dtune {

// MemAvailable from /proc/meminfo in bytes (the kernel's estimate of what can be allocated without
// swapping), or 0 when it cannot be read.
uint64_t host_memory_available_bytes();

// "1.5 GiB", "512 MiB", "12 KiB", "100 B".
std::string format_bytes(uint64_t bytes);

// The one check every binary makes before a large host allocation. Collective over ctx.comm():
// each rank takes its share of its node's MemAvailable (MemAvailable / ranks on the node), the
// rank with the smallest share decides for all, and every rank throws the same UsageError (exit 2,
// one line) when `per_rank_bytes` is more than that share, instead of std::bad_alloc or the
// kernel's OOM killer (exit 137, no message) later:
// "<what> needs 48.0 GiB of host memory per rank (96.0 GiB for the 2 rank(s) on HOST), but 22.1 GiB
// is available there: <fix>". Refusing is bad input (exit 2), as an impossible size is; exit 4 is
// for an allocation that was tried and failed. An unknown MemAvailable (0) passes.
void refuse_unless_host_fits(uint64_t per_rank_bytes, const RunContext& ctx,
                             const std::string& what, const std::string& fix);

// The same test on given figures, for one process (no communicator): `ranks_on_node` ranks of
// `per_rank_bytes` each against `available` bytes on `host`; throws the line above.
void refuse_unless_fits(uint64_t per_rank_bytes, int ranks_on_node, uint64_t available,
                        const std::string& host, const std::string& what, const std::string& fix);

}  // namespace dtune
