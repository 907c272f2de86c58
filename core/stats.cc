// Iteration statistics, rank spread and the weighted alpha-beta least-squares fit.
#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtune {

namespace {
// Linear interpolation between order statistics of sorted, non-empty `v` (numpy's "linear").
double sorted_percentile(const std::vector<double>& v, double q) {
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}
}  // namespace

double percentile(std::vector<double> v, double q) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return sorted_percentile(v, q);
}

Summary summarize(std::span<const double> values) {
  std::vector<double> v;
  v.reserve(values.size());
  for (double x : values)
    if (!std::isnan(x)) v.push_back(x);
  Summary s;
  s.n = v.size();
  if (v.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    s.min = s.p50 = s.p95 = s.p99 = s.max = s.mean = s.stdev = s.cv = nan;
    return s;
  }
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.p50 = sorted_percentile(v, 50);
  s.p95 = sorted_percentile(v, 95);
  s.p99 = sorted_percentile(v, 99);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  s.cv = s.mean != 0 ? s.stdev / s.mean : 0;
  return s;
}

RankSpread spread_over_ranks(std::span<const double> per_rank) {
  RankSpread r;
  if (per_rank.empty()) return r;
  double sum = 0;
  r.min = r.max = per_rank[0];
  r.slowest_rank = r.fastest_rank = 0;
  for (size_t i = 0; i < per_rank.size(); ++i) {
    sum += per_rank[i];
    if (per_rank[i] > r.max) {
      r.max = per_rank[i];
      r.slowest_rank = static_cast<int>(i);
    }
    if (per_rank[i] < r.min) {
      r.min = per_rank[i];
      r.fastest_rank = static_cast<int>(i);
    }
  }
  r.avg = sum / static_cast<double>(per_rank.size());
  return r;
}

AlphaBetaFit fit_alpha_beta(std::span<const double> bytes, std::span<const double> time_us) {
  // Weighted least squares for t = a + b·x with weights w = 1/t²; then alpha = a and
  // B = 1/b bytes per µs = 1e-3/b GB/s.
  AlphaBetaFit fit;
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  size_t n = 0;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  for (size_t i = 0; i < std::min(bytes.size(), time_us.size()); ++i) {
    const double x = bytes[i], y = time_us[i];
    if (!(y > 0) || std::isnan(x)) continue;
    const double w = 1.0 / (y * y);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
    xmin = std::min(xmin, x);
    xmax = std::max(xmax, x);
    ++n;
  }
  const double det = sw * sxx - sx * sx;
  if (n < 2 || xmax <= xmin || det <= 0) {
    fit.alpha_us = fit.bandwidth_gbps = fit.r2 = std::numeric_limits<double>::quiet_NaN();
    return fit;
  }
  const double b = (sw * sxy - sx * sy) / det;
  const double a = (sy - b * sx) / sw;
  fit.alpha_us = a;
  fit.bandwidth_gbps = b > 0 ? 1e-3 / b : std::numeric_limits<double>::infinity();
  const double ymean = sy / sw;
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < std::min(bytes.size(), time_us.size()); ++i) {
    const double x = bytes[i], y = time_us[i];
    if (!(y > 0) || std::isnan(x)) continue;
    const double w = 1.0 / (y * y);
    ss_res += w * (y - (a + b * x)) * (y - (a + b * x));
    ss_tot += w * (y - ymean) * (y - ymean);
  }
  fit.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  fit.ok = true;
  return fit;
}

}  // namespace dtune
