// Builds without CUDA have no CUDA clock.
#include "core/error.h"
#include "train/phase_clock.h"

namespace dtune::train {

std::unique_ptr<PhaseClock> make_cuda_clock(int) {
  throw UsageError("--device cuda: this dtune was built without CUDA (see README: CUDA_HOME)");
}

}  // namespace dtune::train
