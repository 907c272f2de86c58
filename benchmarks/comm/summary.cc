// Per-rank samples, their packing for the gather, and the statistics of a size and a configuration.
#include "benchmarks/comm/summary.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "benchmarks/comm/bandwidth.h"

namespace dtune::comm {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double combine(TimeMode m, const RankSpread& r, double rank0) {
  switch (m) {
    case TimeMode::kRank0:
      return rank0;
    case TimeMode::kAvg:
      return r.avg;
    case TimeMode::kMin:
      return r.min;
    case TimeMode::kMax:
      return r.max;
  }
  return r.avg;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// One placement over every rank: the iteration statistics, the per-rank spread, the reported
// time and bandwidths, and the wrong elements summed over the ranks that checked.
void summarize_placement(const OpShape& s, const std::vector<RankSample>& samples, size_t pi,
                         TimeMode mode, SizeSummary::PerPlacement& p) {
  p.run = !samples.empty() && samples[0].placement[pi].run;
  if (!p.run) return;
  const int nranks = static_cast<int>(samples.size());
  std::vector<double> all, means;
  int64_t wrong = 0;
  bool checked = false;
  for (const RankSample& r : samples) {
    const auto& rp = r.placement[pi];
    all.insert(all.end(), rp.times_us.begin(), rp.times_us.end());
    means.push_back(mean(rp.times_us));
    if (rp.checked) {
      checked = true;
      wrong += rp.wrong;
    }
  }
  p.iters = summarize(all);
  p.ranks = spread_over_ranks(means);
  p.time_us = combine(mode, p.ranks, means[0]);
  p.algbw_gbps = algbw_gbps(static_cast<double>(s.bytes), p.time_us);
  p.busbw_gbps = busbw_gbps(s.collective, nranks, static_cast<double>(s.bytes), p.time_us);
  p.wrong = checked ? wrong : -1;
}

const char* status_text(ConfigEnd end, const std::vector<SizeSummary>& sizes) {
  if (end == ConfigEnd::kInterrupted) return "interrupted";
  if (end == ConfigEnd::kTimeout) return "timeout";
  for (const auto& s : sizes)
    for (const auto& r : s.samples)
      for (const auto& p : r.placement)
        if (p.checked && p.wrong > 0) return "wrong";
  return "ok";
}

}  // namespace

size_t packed_size(size_t iters) { return 2 * iters + 2; }

std::vector<double> pack(const RankSample& s, size_t iters) {
  std::vector<double> flat(packed_size(iters), kNaN);
  for (size_t pi = 0; pi < 2; ++pi) {
    const auto& p = s.placement[pi];
    if (p.run)
      std::copy_n(p.times_us.begin(), std::min(iters, p.times_us.size()),
                  flat.begin() + static_cast<long>(pi * iters));
    flat[2 * iters + pi] = p.checked ? static_cast<double>(p.wrong) : -1;
  }
  return flat;
}

RankSample unpack(std::span<const double> flat, size_t iters) {
  RankSample s;
  for (size_t pi = 0; pi < 2; ++pi) {
    auto& p = s.placement[pi];
    const double* it = flat.data() + pi * iters;
    p.run = iters > 0 && !std::isnan(it[0]);
    if (p.run) p.times_us.assign(it, it + iters);
    const double w = flat[2 * iters + pi];
    p.checked = w >= 0;
    p.wrong = p.checked ? static_cast<int64_t>(w) : 0;
  }
  return s;
}

std::vector<RankSample> unpack_ranks(std::span<const double> all, size_t nranks, size_t iters) {
  std::vector<RankSample> out;
  for (size_t r = 0; r < nranks; ++r)
    out.push_back(unpack(all.subspan(r * packed_size(iters), packed_size(iters)), iters));
  return out;
}

SizeSummary summarize_size(const OpShape& s, std::vector<RankSample> samples, TimeMode mode) {
  SizeSummary out;
  out.shape = s;
  out.samples = std::move(samples);
  for (size_t pi = 0; pi < 2; ++pi)
    summarize_placement(s, out.samples, pi, mode, out.placement[pi]);
  return out;
}

CommSummary summarize_config(Collective c, Dtype d, ReduceOp op, int nranks,
                             std::vector<SizeSummary> sizes, ConfigEnd end) {
  CommSummary out;
  out.collective = c;
  out.dtype = d;
  out.op = op;
  out.nranks = nranks;
  out.busbw_factor = busbw_factor(c, nranks);
  // t = alpha + S × factor / B over the out-of-place medians (doc/metrics.md).
  std::vector<double> fit_x, fit_t;
  for (const auto& s : sizes) {
    if (!s.placement[0].run) continue;
    fit_x.push_back(static_cast<double>(s.shape.bytes) * out.busbw_factor);
    fit_t.push_back(s.placement[0].iters.p50);
  }
  out.fit = fit_alpha_beta(fit_x, fit_t);
  out.status = status_text(end, sizes);
  out.sizes = std::move(sizes);
  return out;
}

void RunTotals::add(const SizeSummary& s) {
  for (const auto& p : s.placement) {
    if (!p.run) continue;
    if (p.wrong > 0) wrong += p.wrong;
    busbw_gbps.push_back(p.busbw_gbps);
  }
}

}  // namespace dtune::comm
