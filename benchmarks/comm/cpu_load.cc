// Busy threads for dtune-comm --load-threads (cpu_load.h).
#include "benchmarks/comm/cpu_load.h"

namespace dtune::comm {

CpuLoad::CpuLoad(int threads) {
  for (int i = 0; i < threads; ++i)
    threads_.emplace_back([this] {
      // A dependent multiply-add chain: one core's worth of work, no memory traffic; `volatile`
      // keeps the compiler from removing it.
      volatile double x = 1.0;
      while (!stop_.load(std::memory_order_relaxed))
        for (int k = 0; k < 4096; ++k) x = x * 0.999999 + 1e-6;
    });
}

CpuLoad::~CpuLoad() {
  stop_.store(true, std::memory_order_relaxed);
  for (auto& t : threads_) t.join();
}

}  // namespace dtune::comm
