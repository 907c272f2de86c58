// LibTorch's CUDA half loaded at run time (core/torch_cuda.h). The binaries no longer link
// libtorch_cuda.so, so on a machine without a CUDA driver it is not in the process at all (the CPU
// it saves is the reason), and loading it later must give what linking it gave: the CUDA kernels
// registered with the dispatcher and LibTorch's CUDA hooks answering, which holds only when
// nothing asked LibTorch about CUDA before main (it keeps its first answer).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "core/torch_cuda.h"

namespace dtune {
namespace {

bool has_cuda_add(const c10::OperatorHandle& add) {
  return add.hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}

TEST(TorchCuda, LoadedAtRunTimeRegistersTheCudaKernelsAndHooks) {
  const c10::OperatorHandle add =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor");
  const bool driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr ||
                      dlopen("libcuda.so.1", RTLD_LAZY) != nullptr;
  // gtest_main called load_torch_cuda_if_driver: loaded where a driver is, absent where none is.
  EXPECT_EQ(has_cuda_add(add), driver);
  EXPECT_EQ(torch_cuda_load_error(), "");

  ASSERT_EQ(load_torch_cuda(), "");
  EXPECT_TRUE(has_cuda_add(add));
  // The stub hooks LibTorch uses without its CUDA half throw here; the real ones give the runtime
  // version it was built with (CUDA 13: 13000 and up).
  EXPECT_GE(at::detail::getCUDAHooks().versionCUDART(), 13000);
  EXPECT_TRUE(at::detail::getCUDAHooks().compiledWithCuDNN());
  EXPECT_EQ(load_torch_cuda(), "") << "a second load is the first one's";
}

}  // namespace
}  // namespace dtune
