// The device probes in a build without CUDA: no GPUs, so callers never measure (device_probes.h).
#include "benchmarks/probe/device_probes.h"
#include "core/error.h"

namespace dtune::probe {

int visible_gpus() { return 0; }

MemoryRecord device_stream(const RunContext&, int64_t) {
  throw Error("device_stream: this build has no CUDA");
}
std::vector<CopyRecord> run_copy(const RunContext&, const CopyOptions&) {
  throw Error("run_copy: this build has no CUDA");
}
std::vector<P2pRecord> run_p2p(int64_t, int64_t) { throw Error("run_p2p: this build has no CUDA"); }
LaunchRecord run_launch(const RunContext&, int64_t) {
  throw Error("run_launch: this build has no CUDA");
}

}  // namespace dtune::probe
