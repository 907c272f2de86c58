// Builds without CUDA: NVTX ranges and marks do nothing.
#include "core/nvtx.h"

namespace dtune {

NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() {}
void nvtx_mark(const char*) {}

}  // namespace dtune
