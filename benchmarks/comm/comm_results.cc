// dtune-comm's HDF5 group: attributes for the settings, the fit and the status; datasets for
// every rank's iterations and wrong counts ([placement][size][rank][iteration]) and the reported
// per-size figures ([placement][size]).
#include "benchmarks/comm/comm_results.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/h5.h"

namespace dtune::comm {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void write_attributes(hid_t id, const CommSummary& c, const Options& o,
                      const std::string& backend) {
  const std::string op_name = is_reduction(c.collective) ? to_string(c.op) : "none";
  const AlphaBetaFit& fit = c.fit;
  h5::write_attr(id, "benchmark", "comm");
  h5::write_attr(id, "collective", to_string(c.collective));
  h5::write_attr(id, "backend", backend);
  // How allreduce ran; every other collective is the library's own (flat).
  h5::write_attr(
      id, "algorithm",
      to_string(c.collective == Collective::kAllreduce ? o.algorithm : Algorithm::kFlat));
  h5::write_attr(id, "mpi_progress", backend == "mpi" ? to_string(o.mpi_progress) : "");
  h5::write_attr(id, "dtype", to_string(c.dtype));
  h5::write_attr(id, "op", op_name);
  h5::write_attr(id, "root", is_rooted(c.collective) ? o.root : -1);
  write_timing_attrs(id, o);
  h5::write_attr(id, "busbw_factor", c.busbw_factor);
  h5::write_attr(id, "status", c.status);
  h5::write_attr(id, "fit_alpha_us", fit.ok ? fit.alpha_us : kNaN);
  h5::write_attr(id, "fit_busbw_gbps", fit.ok ? fit.bandwidth_gbps : kNaN);
  h5::write_attr(id, "fit_r2", fit.ok ? fit.r2 : kNaN);
  h5::write_strings(id, "placement", {to_string(kPlacements[0]), to_string(kPlacements[1])});
}

// time_us (2, S, R, I): NaN where a placement did not run; wrong (2, S, R): -1 where not checked.
void write_samples(hid_t id, const CommSummary& c, size_t I) {
  const size_t S = c.sizes.size(), R = static_cast<size_t>(c.nranks);
  std::vector<double> times(2 * S * R * I, kNaN);
  std::vector<int64_t> wrong(2 * S * R, -1);
  for (size_t p = 0; p < 2; ++p)
    for (size_t s = 0; s < S; ++s)
      for (size_t r = 0; r < R; ++r) {
        const auto& rp = c.sizes[s].samples[r].placement[p];
        const size_t at = (p * S + s) * R + r;
        if (rp.run)
          std::copy_n(rp.times_us.begin(), std::min(I, rp.times_us.size()), &times[at * I]);
        if (rp.checked) wrong[at] = rp.wrong;
      }
  h5::write_dataset(id, "time_us", {2, S, R, I}, times.data());
  h5::write_dataset(id, "wrong", {2, S, R}, wrong.data());
}

// Per size: the shape as measured (rounded to the collective's granularity) and as asked for.
void write_shapes(hid_t id, const CommSummary& c) {
  std::vector<int64_t> size_b, req_b, count;
  for (const SizeSummary& z : c.sizes) {
    size_b.push_back(static_cast<int64_t>(z.shape.bytes));
    req_b.push_back(static_cast<int64_t>(z.shape.requested_bytes));
    count.push_back(static_cast<int64_t>(z.shape.count));
  }
  const hsize_t S = c.sizes.size();
  h5::write_dataset(id, "size_bytes", {S}, size_b.data());
  h5::write_dataset(id, "requested_bytes", {S}, req_b.data());
  h5::write_dataset(id, "count", {S}, count.data());
}

// (2, S): the reported time, bandwidths and slowest rank; NaN and -1 where a placement did not run.
void write_reported(hid_t id, const CommSummary& c) {
  const size_t S = c.sizes.size();
  std::vector<double> rep(2 * S), alg(2 * S), bus(2 * S);
  std::vector<int64_t> slowest(2 * S);
  for (size_t s = 0; s < S; ++s)
    for (size_t p = 0; p < 2; ++p) {
      const auto& pp = c.sizes[s].placement[p];
      rep[p * S + s] = pp.run ? pp.time_us : kNaN;
      alg[p * S + s] = pp.run ? pp.algbw_gbps : kNaN;
      bus[p * S + s] = pp.run ? pp.busbw_gbps : kNaN;
      slowest[p * S + s] = pp.run ? pp.ranks.slowest_rank : -1;
    }
  h5::write_dataset(id, "time_us_reported", {2, S}, rep.data());
  h5::write_dataset(id, "algbw_gbps", {2, S}, alg.data());
  h5::write_dataset(id, "busbw_gbps", {2, S}, bus.data());
  h5::write_dataset(id, "slowest_rank", {2, S}, slowest.data());
}

}  // namespace

void write_timing_attrs(hid_t id, const Options& o) {
  h5::write_attr(id, "iters", o.iters);
  h5::write_attr(id, "warmup_iters", o.warmup_iters);
  h5::write_attr(id, "check_iters", o.check_iters);
  h5::write_attr(id, "blocking", o.blocking == Blocking::kYes ? 1 : 0);
  h5::write_attr(id, "time_mode", to_string(o.time_mode));
  h5::write_attr(id, "load_threads", o.load_threads);
  h5::write_attr(id, "gap_us", o.gap_us);
}

void write_comm_group(ResultsFile& file, const CommSummary& c, const Options& o,
                      const std::string& backend) {
  if (c.sizes.empty()) return;
  std::string name = to_string(c.collective) + "-" + to_string(c.dtype);
  if (is_reduction(c.collective)) name.append("-").append(to_string(c.op));
  h5::Handle g = file.new_run(name);
  write_attributes(g.get(), c, o, backend);
  write_shapes(g.get(), c);
  write_samples(g.get(), c, static_cast<size_t>(o.iters));
  write_reported(g.get(), c);
  g.close();
  file.flush();
}

}  // namespace dtune::comm
