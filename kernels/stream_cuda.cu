// STREAM on a CUDA device (see stream_cuda.h). The arithmetic uses __dmul_rn/__dadd_rn so that
// nvcc cannot contract triad into an FMA: results equal the host reference bit for bit.
#include <cuda_runtime.h>

#include "core/cuda/cuda_error.h"
#include "kernels/stream_cuda.h"

namespace dtune::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void stream_kernel(int k, double* __restrict__ a, double* __restrict__ b,
                              double* __restrict__ c, size_t n, double s) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    switch (k) {
      case 0:
        c[j] = a[j];
        break;
      case 1:
        b[j] = __dmul_rn(s, c[j]);
        break;
      case 2:
        c[j] = __dadd_rn(a[j], b[j]);
        break;
      default:
        a[j] = __dadd_rn(b[j], __dmul_rn(s, c[j]));
        break;
    }
  }
}

__global__ void stream_init(double* a, double* b, double* c, size_t n) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    a[j] = 1.0;
    b[j] = 2.0;
    c[j] = 0.0;
  }
}

int grid_for(size_t n) {
  int device = 0, sms = 1;
  DTUNE_CUDA_CHECK(cudaGetDevice(&device));
  DTUNE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t needed = (n + kThreads - 1) / kThreads;
  const size_t cap = static_cast<size_t>(sms) * 32;  // enough blocks in flight to hide latency
  return static_cast<int>(needed < cap ? (needed > 0 ? needed : 1) : cap);
}

}  // namespace

DeviceStream::DeviceStream(size_t n) : n_(n) {
  DTUNE_CUDA_CHECK(cudaMalloc(&a_, n * sizeof(double)));
  DTUNE_CUDA_CHECK(cudaMalloc(&b_, n * sizeof(double)));
  DTUNE_CUDA_CHECK(cudaMalloc(&c_, n * sizeof(double)));
  reset();
}

DeviceStream::~DeviceStream() {
  DTUNE_CUDA_WARN(cudaFree(a_));
  DTUNE_CUDA_WARN(cudaFree(b_));
  DTUNE_CUDA_WARN(cudaFree(c_));
}

void DeviceStream::reset() {
  stream_init<<<grid_for(n_), kThreads>>>(a_, b_, c_, n_);
  DTUNE_CUDA_CHECK(cudaGetLastError());
  DTUNE_CUDA_CHECK(cudaDeviceSynchronize());
}

float DeviceStream::run_ms(StreamKernel k) {
  cudaEvent_t start, stop;
  DTUNE_CUDA_CHECK(cudaEventCreate(&start));
  DTUNE_CUDA_CHECK(cudaEventCreate(&stop));
  DTUNE_CUDA_CHECK(cudaEventRecord(start));
  stream_kernel<<<grid_for(n_), kThreads>>>(static_cast<int>(k), a_, b_, c_, n_, kStreamScalar);
  DTUNE_CUDA_CHECK(cudaGetLastError());
  DTUNE_CUDA_CHECK(cudaEventRecord(stop));
  DTUNE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DTUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  DTUNE_CUDA_WARN(cudaEventDestroy(start));
  DTUNE_CUDA_WARN(cudaEventDestroy(stop));
  return ms;
}

std::vector<std::vector<double>> DeviceStream::download() const {
  std::vector<std::vector<double>> out(3, std::vector<double>(n_));
  DTUNE_CUDA_CHECK(cudaMemcpy(out[0].data(), a_, n_ * sizeof(double), cudaMemcpyDeviceToHost));
  DTUNE_CUDA_CHECK(cudaMemcpy(out[1].data(), b_, n_ * sizeof(double), cudaMemcpyDeviceToHost));
  DTUNE_CUDA_CHECK(cudaMemcpy(out[2].data(), c_, n_ * sizeof(double), cudaMemcpyDeviceToHost));
  return out;
}

void DeviceStream::upload(const std::vector<double>& a, const std::vector<double>& b,
                          const std::vector<double>& c) {
  DTUNE_CUDA_CHECK(cudaMemcpy(a_, a.data(), n_ * sizeof(double), cudaMemcpyHostToDevice));
  DTUNE_CUDA_CHECK(cudaMemcpy(b_, b.data(), n_ * sizeof(double), cudaMemcpyHostToDevice));
  DTUNE_CUDA_CHECK(cudaMemcpy(c_, c.data(), n_ * sizeof(double), cudaMemcpyHostToDevice));
}

}  // namespace dtune::kernels
