// Statistics over iterations and ranks, and the alpha-beta fit on synthetic data with known
// alpha and bandwidth.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/stats.h"

namespace dtune {
namespace {

TEST(Summarize, KnownValues) {
  // 1..100: numpy.percentile(linear) gives p50 50.5, p95 95.05, p99 99.01.
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Summary s = summarize(v);
  EXPECT_EQ(s.n, 100u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.p50, 50.5);
  EXPECT_NEAR(s.p95, 95.05, 1e-12);
  EXPECT_NEAR(s.p99, 99.01, 1e-12);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_NEAR(s.stdev, 29.011491975882016, 1e-12);  // sample stdev of 1..100
  EXPECT_NEAR(s.cv, 29.011491975882016 / 50.5, 1e-12);
}

TEST(Summarize, IgnoresNaNAndHandlesEmpty) {
  const std::vector<double> v = {3, NAN, 1, 2};
  const Summary s = summarize(v);
  EXPECT_EQ(s.n, 3u);
  EXPECT_DOUBLE_EQ(s.p50, 2);
  EXPECT_DOUBLE_EQ(s.stdev, 1);
  const Summary e = summarize(std::vector<double>{});
  EXPECT_EQ(e.n, 0u);
  EXPECT_TRUE(std::isnan(e.p50));
}

TEST(RankSpread, NamesSlowestRank) {
  const std::vector<double> per_rank = {10, 12, 30, 8};
  const RankSpread r = spread_over_ranks(per_rank);
  EXPECT_DOUBLE_EQ(r.min, 8);
  EXPECT_DOUBLE_EQ(r.max, 30);
  EXPECT_DOUBLE_EQ(r.avg, 15);
  EXPECT_EQ(r.slowest_rank, 2);
  EXPECT_EQ(r.fastest_rank, 3);
}

TEST(AlphaBetaFit, RecoversKnownParameters) {
  // t = 5 us + S / (20 GB/s): 20 GB/s = 20e3 bytes per us.
  std::vector<double> bytes, t;
  for (double s = 8; s <= (64 << 20); s *= 2) {
    bytes.push_back(s);
    t.push_back(5.0 + s / 20e3);
  }
  const AlphaBetaFit fit = fit_alpha_beta(bytes, t);
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.alpha_us, 5.0, 1e-9);
  EXPECT_NEAR(fit.bandwidth_gbps, 20.0, 1e-9);
  EXPECT_NEAR(fit.r2, 1.0, 1e-12);
}

TEST(AlphaBetaFit, NoisyDataStaysClose) {
  // ±2% multiplicative noise, alternating: the relative-error fit stays within a few percent.
  std::vector<double> bytes, t;
  int k = 0;
  for (double s = 8; s <= (64 << 20); s *= 2, ++k) {
    bytes.push_back(s);
    t.push_back((2.0 + s / 10e3) * (k % 2 ? 1.02 : 0.98));
  }
  const AlphaBetaFit fit = fit_alpha_beta(bytes, t);
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.alpha_us, 2.0, 0.1);
  EXPECT_NEAR(fit.bandwidth_gbps, 10.0, 0.5);
}

TEST(AlphaBetaFit, NeedsTwoSizes) {
  EXPECT_FALSE(fit_alpha_beta(std::vector<double>{8}, std::vector<double>{1}).ok);
  EXPECT_FALSE(fit_alpha_beta(std::vector<double>{8, 8}, std::vector<double>{1, 2}).ok);
}

}  // namespace
}  // namespace dtune
