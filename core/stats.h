// Statistics over iterations and over ranks, and the alpha-beta fit of collective times.
// Percentiles interpolate linearly between order statistics (numpy's default, "linear"), so the
// Python reports and the C++ tables agree.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace dtune {

struct Summary {
  size_t n = 0;
  double min = 0, p50 = 0, p95 = 0, p99 = 0, max = 0;
  double mean = 0;
  double stdev = 0;  // sample standard deviation (n - 1); 0 for n < 2
  double cv = 0;     // stdev / mean; 0 when mean is 0
};
// NaN values are ignored. An empty input gives n = 0 and NaN for every statistic.
Summary summarize(std::span<const double> values);
double percentile(std::vector<double> values, double q);  // q in [0, 100]

// One value per rank (index = rank): min, mean and max, and which rank was slowest (highest).
struct RankSpread {
  double min = 0, avg = 0, max = 0;
  int slowest_rank = -1;
  int fastest_rank = -1;
};
RankSpread spread_over_ranks(std::span<const double> per_rank);

// Least-squares fit of t = alpha + x / B (x in bytes, t in microseconds): latency alpha in µs and
// asymptotic bandwidth B in GB/s (1e9 B/s). Weighted by 1/t² so that the fit minimises relative
// error: small messages determine alpha and large ones B, instead of the largest size dominating.
// For collectives x is S × busbw factor, so B is the asymptotic bus bandwidth (Thakur et al. 2005:
// a ring's busbw recovers 1/beta). r2 is the weighted coefficient of determination.
struct AlphaBetaFit {
  double alpha_us = 0;
  double bandwidth_gbps = 0;
  double r2 = 0;
  bool ok = false;  // false with fewer than two distinct sizes
};
AlphaBetaFit fit_alpha_beta(std::span<const double> bytes, std::span<const double> time_us);

}  // namespace dtune
