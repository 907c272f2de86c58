// The CUDA kernels against their host references, exactly: STREAM's four kernels and the fused
// bucket pack/unpack for every dtype pair. Skips itself, visibly, without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cuda/cuda_error.h"
#include "kernels/bucket_pack_cuda.h"
#include "kernels/stream_cuda.h"

namespace dtune::kernels {
namespace {

#define DTUNE_NEED_GPU() \
  if (!has_cuda_device()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount)"

TEST(KernelsCuda, StreamEqualsTheHostReference) {
  DTUNE_NEED_GPU();
  const size_t n = 1 << 20;
  std::vector<double> a(n), b(n), c(n);
  for (size_t j = 0; j < n; ++j) {
    a[j] = 1.0 + static_cast<double>(j % 17) / 7;
    b[j] = 2.0 - static_cast<double>(j % 13) / 9;
    c[j] = static_cast<double>(j % 7) / 3;
  }
  DeviceStream d(n);
  d.upload(a, b, c);
  for (StreamKernel k : kStreamKernels) {
    d.run_ms(k);
    stream_reference(k, a.data(), b.data(), c.data(), n);
    const auto got = d.download();
    ASSERT_EQ(got[0], a) << to_string(k);
    ASSERT_EQ(got[1], b) << to_string(k);
    ASSERT_EQ(got[2], c) << to_string(k);
  }
}

TEST(KernelsCuda, BucketPackEqualsTheHostReference) {
  DTUNE_NEED_GPU();
  const std::vector<int64_t> sizes = {3, 0, 1000, 300001, 7, 65537};
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (Dtype g : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16}) {
    for (Dtype w : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16}) {
      const size_t gs = dtype_size(g), ws = dtype_size(w);
      std::vector<char> host(static_cast<size_t>(total) * gs);
      for (int64_t j = 0; j < total; ++j) {
        const float v = normal(rng);
        pack_bucket_reference({{&v, 1}}, Dtype::kFloat32, host.data() + j * gs, g, 1.0f);
      }
      void *raw_g = nullptr, *raw_flat = nullptr;
      DTUNE_CUDA_CHECK(cudaMalloc(&raw_g, host.size()));
      DTUNE_CUDA_CHECK(cudaMalloc(&raw_flat, static_cast<size_t>(total) * ws));
      char *dev_g = static_cast<char *>(raw_g), *dev_flat = static_cast<char *>(raw_flat);
      DTUNE_CUDA_CHECK(cudaMemcpy(dev_g, host.data(), host.size(), cudaMemcpyHostToDevice));
      std::vector<TensorRef> hrefs, drefs;
      std::vector<MutableTensorRef> dmut;
      int64_t off = 0;
      for (int64_t s : sizes) {
        hrefs.push_back({host.data() + off * gs, s});
        drefs.push_back({dev_g + off * gs, s});
        dmut.push_back({dev_g + off * gs, s});
        off += s;
      }
      const float scale = static_cast<float>(1.0 / 3.0);
      pack_bucket_cuda(drefs, g, dev_flat, w, scale, nullptr);
      std::vector<char> want(static_cast<size_t>(total) * ws), got(want.size());
      pack_bucket_reference(hrefs, g, want.data(), w, scale);
      DTUNE_CUDA_CHECK(cudaMemcpy(got.data(), dev_flat, got.size(), cudaMemcpyDeviceToHost));
      ASSERT_EQ(got, want) << "pack " << to_string(g) << " -> " << to_string(w);
      unpack_bucket_cuda(dev_flat, w, dmut, g, nullptr);
      std::vector<char> back(host.size()), back_want(host.size());
      std::vector<MutableTensorRef> hmut;
      off = 0;
      for (int64_t s : sizes) {
        hmut.push_back({back_want.data() + off * gs, s});
        off += s;
      }
      unpack_bucket_reference(want.data(), w, hmut, g);
      DTUNE_CUDA_CHECK(cudaMemcpy(back.data(), dev_g, back.size(), cudaMemcpyDeviceToHost));
      ASSERT_EQ(back, back_want) << "unpack " << to_string(g) << " <- " << to_string(w);
      DTUNE_CUDA_CHECK(cudaFree(dev_g));
      DTUNE_CUDA_CHECK(cudaFree(dev_flat));
    }
  }
}

}  // namespace
}  // namespace dtune::kernels
