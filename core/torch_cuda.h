// LibTorch's CUDA half (libtorch_cuda.so: the CUDA kernels, cuBLAS, cuDNN and the CUDA hooks) is
// loaded at run time, not linked (cmake/DtuneTorch.cmake): loading and registering it cost every
// process that links LibTorch about 0.12 s of CPU (a 1-rank gpt2-tiny run of 2 steps: 0.665 ->
// 0.545 CPU s, medians of 12), on machines where it can do nothing because no CUDA driver is
// installed. Where a driver is, it is loaded first thing in main, as the linker would have loaded
// it, so that the GPU paths see the LibTorch they always saw.
#pragma once

#include <string>

namespace dtune {

// Loads libtorch_cuda.so from the folder this process loaded libtorch_cpu.so from, when it did
// (the binary links LibTorch) and a CUDA driver is installed (libcuda.so.1 loads). Call it first
// thing in main, before any LibTorch call: LibTorch asks for its CUDA hooks once and keeps the
// answer, so a load after that question leaves CUDA unavailable for the process's life. Runs once
// per process; a failed load is printed once (CUDA is then unavailable) and kept for
// torch_cuda_load_error(). run_main and tests/gtest_main.cc call it.
void load_torch_cuda_if_driver();

// Loads libtorch_cuda.so whether or not a driver is installed (its kernels register and its CUDA
// hooks answer; without a driver they count no device). Returns "" on success (or when it was
// loaded already), else why not. For tests; binaries call load_torch_cuda_if_driver.
std::string load_torch_cuda();

// Why load_torch_cuda_if_driver did not load it though a driver is installed; "" otherwise.
const std::string& torch_cuda_load_error();

}  // namespace dtune
