// STREAM on the host: every kernel, on several threads, equals the one-thread reference exactly,
// after a sequence of kernels that leaves distinct values in every array; and the byte counts are
// STREAM's.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/stream.h"

namespace dtune::kernels {
namespace {

// Fills the arrays with index-dependent values, so a kernel that skipped or swapped elements
// (a wrong chunk boundary) would show.
void fill(double* a, double* b, double* c, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    a[j] = 1.0 + static_cast<double>(j % 17) / 4;
    b[j] = 2.0 - static_cast<double>(j % 13) / 8;
    c[j] = static_cast<double>(j % 7) / 3;
  }
}

TEST(Stream, EveryKernelEqualsTheReferenceOnSeveralThreads) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
    for (int threads : {1, 2, 3}) {
      HostStream s(n, threads);
      std::vector<double> a(n), b(n), c(n);
      fill(s.a(), s.b(), s.c(), n);
      fill(a.data(), b.data(), c.data(), n);
      for (int round = 0; round < 2; ++round) {
        for (StreamKernel k : kStreamKernels) {
          s.run(k);
          stream_reference(k, a.data(), b.data(), c.data(), n);
          for (size_t j = 0; j < n; ++j) {
            ASSERT_EQ(s.a()[j], a[j]) << to_string(k) << " n=" << n << " j=" << j;
            ASSERT_EQ(s.b()[j], b[j]) << to_string(k) << " n=" << n << " j=" << j;
            ASSERT_EQ(s.c()[j], c[j]) << to_string(k) << " n=" << n << " j=" << j;
          }
        }
      }
    }
  }
}

TEST(Stream, StartsFromStreamsInitialValues) {
  HostStream s(4097, 2);
  for (size_t j = 0; j < s.size(); ++j) {
    ASSERT_EQ(s.a()[j], 1.0);
    ASSERT_EQ(s.b()[j], 2.0);
    ASSERT_EQ(s.c()[j], 0.0);
  }
  // STREAM's own check: after copy, scale, add, triad from (1, 2, 0): c = 1, b = 3, c = 4, a = 15.
  for (StreamKernel k : kStreamKernels) s.run(k);
  EXPECT_EQ(s.a()[4096], 15.0);
  EXPECT_EQ(s.b()[4096], 3.0);
  EXPECT_EQ(s.c()[4096], 4.0);
}

TEST(Stream, BytesCountedAsStreamCountsThem) {
  // 1e9 doubles in one second: copy and scale move 16 GB, add and triad 24 GB.
  EXPECT_DOUBLE_EQ(stream_gbps(StreamKernel::kCopy, 1000000000, 1.0), 16.0);
  EXPECT_DOUBLE_EQ(stream_gbps(StreamKernel::kScale, 1000000000, 1.0), 16.0);
  EXPECT_DOUBLE_EQ(stream_gbps(StreamKernel::kAdd, 1000000000, 1.0), 24.0);
  EXPECT_DOUBLE_EQ(stream_gbps(StreamKernel::kTriad, 1000000000, 2.0), 12.0);
}

}  // namespace
}  // namespace dtune::kernels
