// Sizes that cannot fit are refused before anything is allocated: a std::bad_alloc halfway through
// making a dataset is a crash, not an answer. What a flag's value needs is weighed against
// MemAvailable from /proc/meminfo, the kernel's estimate of the memory that new allocations can
// take without swapping (proc(5)). Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace dtune::data {

// MemAvailable in bytes, or -1 where /proc/meminfo has none (not Linux, or a kernel before 3.14).
int64_t available_memory_bytes();

// Throws UsageError "<what> needs N bytes (x.y GiB) but M bytes (x.y GiB) are available
// (MemAvailable in /proc/meminfo): <fix>" when needed_bytes exceeds what is available; does nothing
// when that is unknown. Sizes are doubles so that a product of flags cannot overflow.
void require_memory(double needed_bytes, const std::string& what, const std::string& fix);

}  // namespace dtune::data
