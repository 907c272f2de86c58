// NVTX ranges, so `nsys profile -t cuda,nvtx,osrt,mpi` shows dtune's phases and gradient-bucket
// reductions on its timeline. Compiled in whenever CUDA is found (core/cuda/nvtx.cc, NVTX v3,
// header-only: without a tool attached each call is a branch on a null pointer); a no-op twin
// (core/nvtx_none.cc) otherwise.
#pragma once

namespace dtune {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
  ~NvtxRange();
};

void nvtx_mark(const char* name);

}  // namespace dtune
