// dtune-comm's FSDP step group: attributes for the model, the settings, the step's totals and the
// status; datasets for the units ([unit]), the calls ([call]) and every rank's iterations of every
// call ([call][rank][iteration]).
#include "benchmarks/comm/fsdp_results.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "benchmarks/comm/bandwidth.h"
#include "benchmarks/comm/comm_results.h"
#include "core/h5.h"

namespace dtune::comm {
namespace {

void write_attributes(hid_t id, const FsdpSummary& s, const Options& o,
                      const std::string& backend) {
  const FsdpPlan& p = s.plan;
  h5::write_attr(id, "benchmark", "comm-fsdp");
  h5::write_attr(id, "pattern", to_string(Pattern::kFsdp));
  h5::write_attr(id, "model", p.model);
  h5::write_attr(id, "model_parameters", p.model_parameters);
  h5::write_attr(id, "shard_unit", p.shard_unit.per_block ? "block" : p.shard_unit.text);
  h5::write_attr(id, "shard_unit_mib", p.shard_unit.per_block ? 0.0 : p.shard_unit.mib);
  h5::write_attr(id, "reshard_after_forward", p.reshard == Reshard::kOn ? 1 : 0);
  h5::write_attr(id, "placement", to_string(p.placement));
  h5::write_attr(id, "dtype", to_string(p.dtype));
  h5::write_attr(id, "op", to_string(ReduceOp::kSum));
  h5::write_attr(id, "backend", backend);
  h5::write_attr(id, "mpi_progress", backend == "mpi" ? to_string(o.mpi_progress) : "");
  write_timing_attrs(id, o);
  h5::write_attr(id, "busbw_factor", busbw_factor(Collective::kAllgather, p.nranks));
  h5::write_attr(id, "step_calls", static_cast<int64_t>(p.calls.size()));
  h5::write_attr(id, "step_bytes", static_cast<int64_t>(s.step_bytes));
  h5::write_attr(id, "step_time_us", s.step_time_us);
  h5::write_attr(id, "forward_time_us", s.forward_time_us);
  h5::write_attr(id, "backward_time_us", s.backward_time_us);
  h5::write_attr(id, "step_algbw_gbps", s.step_algbw_gbps);
  h5::write_attr(id, "step_busbw_gbps", s.step_busbw_gbps);
  h5::write_attr(id, "wrong", s.wrong);
  h5::write_attr(id, "status", s.status);
}

// unit_name [U], unit_parameters, unit_padded, unit_bytes (int64 [U]).
void write_units(hid_t id, const FsdpPlan& p) {
  std::vector<std::string> name;
  std::vector<int64_t> params, padded, bytes;
  for (const FsdpUnit& u : p.units) {
    name.push_back(u.name);
    params.push_back(u.parameters);
    padded.push_back(u.padded);
    bytes.push_back(static_cast<int64_t>(u.bytes));
  }
  const hsize_t U = p.units.size();
  h5::write_strings(id, "unit_name", name);
  h5::write_dataset(id, "unit_parameters", {U}, params.data());
  h5::write_dataset(id, "unit_padded", {U}, padded.data());
  h5::write_dataset(id, "unit_bytes", {U}, bytes.data());
}

// Per call: what it was and what it measured ([C]), and every rank's iterations ([C, R, I]).
void write_calls(hid_t id, const FsdpSummary& s, size_t I) {
  const FsdpPlan& p = s.plan;
  const size_t C = p.calls.size(), R = static_cast<size_t>(p.nranks);
  std::vector<std::string> phase, collective, placement;
  std::vector<int64_t> unit, size_b, count, slowest;
  std::vector<double> rep, alg, bus, times(C * R * I, std::numeric_limits<double>::quiet_NaN());
  std::vector<int64_t> wrong(C * R, -1);
  for (size_t c = 0; c < C; ++c) {
    const FsdpCall& call = p.calls[c];
    const size_t pi = placement_index(call.placement);
    const auto& z = s.calls[c].placement[pi];
    phase.push_back(to_string(call.phase));
    collective.push_back(to_string(call.shape.collective));
    placement.push_back(to_string(call.placement));
    unit.push_back(static_cast<int64_t>(call.unit));
    size_b.push_back(static_cast<int64_t>(call.shape.bytes));
    count.push_back(static_cast<int64_t>(call.shape.count));
    rep.push_back(z.time_us);
    alg.push_back(z.algbw_gbps);
    bus.push_back(z.busbw_gbps);
    slowest.push_back(z.ranks.slowest_rank);
    for (size_t r = 0; r < R; ++r) {
      const auto& rp = s.calls[c].samples[r].placement[pi];
      std::copy_n(rp.times_us.begin(), std::min(I, rp.times_us.size()), &times[(c * R + r) * I]);
      if (rp.checked) wrong[c * R + r] = rp.wrong;
    }
  }
  h5::write_strings(id, "call_phase", phase);
  h5::write_dataset(id, "call_unit", {C}, unit.data());
  h5::write_strings(id, "call_collective", collective);
  h5::write_strings(id, "call_placement", placement);
  h5::write_dataset(id, "size_bytes", {C}, size_b.data());
  h5::write_dataset(id, "count", {C}, count.data());
  h5::write_dataset(id, "time_us", {C, R, I}, times.data());
  h5::write_dataset(id, "wrong", {C, R}, wrong.data());
  h5::write_dataset(id, "time_us_reported", {C}, rep.data());
  h5::write_dataset(id, "algbw_gbps", {C}, alg.data());
  h5::write_dataset(id, "busbw_gbps", {C}, bus.data());
  h5::write_dataset(id, "slowest_rank", {C}, slowest.data());
}

}  // namespace

void write_fsdp_group(ResultsFile& file, const FsdpSummary& s, const Options& o,
                      const std::string& backend) {
  h5::Handle g = file.new_run("fsdp-" + s.plan.model + "-" + to_string(s.plan.dtype));
  write_attributes(g.get(), s, o, backend);
  write_units(g.get(), s.plan);
  write_calls(g.get(), s, static_cast<size_t>(o.iters));
  g.close();
  file.flush();
}

}  // namespace dtune::comm
