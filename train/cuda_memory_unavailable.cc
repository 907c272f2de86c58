// CPU-only builds: no GPU memory to report.
#include "train/cuda_memory.h"

namespace dtune::train {

int64_t cuda_peak_allocated_bytes(int) { return 0; }
int64_t cuda_peak_reserved_bytes(int) { return 0; }
int64_t cuda_allocated_bytes(int) { return 0; }
void cuda_reset_peak(int) {}
void cuda_reset_peak_and_cache(int) {}
int64_t cuda_usable_bytes(int) { return 0; }

}  // namespace dtune::train
