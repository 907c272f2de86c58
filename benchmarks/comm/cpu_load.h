// dtune-comm --load-threads: busy threads beside the measurement. Each spins on arithmetic (no
// memory traffic) from construction to destruction, so that collectives are timed while the
// rank's cores are contended, as in CPU training, where a rank's compute threads run beside its
// communication thread. The scaling model (`dtune model`) fits the link from such runs for a
// training run with as many compute threads per rank.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace dtune::comm {

class CpuLoad {
 public:
  explicit CpuLoad(int threads);
  ~CpuLoad();
  CpuLoad(const CpuLoad&) = delete;
  CpuLoad& operator=(const CpuLoad&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace dtune::comm
