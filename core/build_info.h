// What this binary was built from: version, git revision (taken at build time), compiler, build
// type, and the LibTorch / CUDA / NCCL versions the build was configured against.
#pragma once

#include <string>

namespace dtune::build_info {

std::string dtune_version();
std::string git_revision();  // empty when built outside a git checkout
bool git_dirty();
std::string compiler();
std::string build_type();
std::string libtorch_version();  // empty when no LibTorch was found at configure time
bool with_cuda();
bool with_nccl();

}  // namespace dtune::build_info
