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

}  // namespace dtune
