// NVTX v3 ranges and marks.
#include "core/nvtx.h"

#include <nvtx3/nvToolsExt.h>

namespace dtune {

NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
void nvtx_mark(const char* name) { nvtxMarkA(name); }

}  // namespace dtune
