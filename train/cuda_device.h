// Making a rank's GPU the current device, for LibTorch (c10::cuda::set_device) and the CUDA
// runtime alike. Both keep a per-thread current device that starts at 0: without this, every
// event, stream or handle that an API creates "on the current device" lands on GPU 0, and on a
// multi-GPU node every local rank >= 1 fails at its first event or times GPU 0's idle stream.
// Defined in cuda_device.cc when built with CUDA; the CPU-only twin throws UsageError.
#pragma once

namespace dtune::train {

// Sets the calling thread's current device to `ordinal`; checks that the CUDA runtime reports it.
void make_cuda_device_current(int ordinal);

}  // namespace dtune::train
