// GoogleTest's main for dtune's unit-test binaries (cmake/DtuneTesting.cmake), ending through
// std::_Exit once every test has run and its output is flushed, as the binaries do
// (core/main_guard.h, end_process): ctest runs each test case as a process of its own, and a binary
// that links LibTorch spends about 0.12 s of CPU at exit unregistering its operators. LibTorch's
// CUDA half is loaded first, where a CUDA driver is, as the binaries' run_main does
// (core/torch_cuda.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/torch_cuda.h"

int main(int argc, char** argv) {
  dtune::load_torch_cuda_if_driver();
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(rc);
}
