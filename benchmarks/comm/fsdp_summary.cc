// The gather layout of a replayed FSDP step and rank 0's summary of it (fsdp_summary.h).
#include "benchmarks/comm/fsdp_summary.h"

#include "benchmarks/comm/bandwidth.h"

namespace dtune::comm {

std::vector<double> pack_calls(const std::vector<RankSample>& calls, size_t iters) {
  std::vector<double> flat;
  flat.reserve(calls.size() * packed_size(iters));
  for (const RankSample& c : calls) {
    const std::vector<double> one = pack(c, iters);
    flat.insert(flat.end(), one.begin(), one.end());
  }
  return flat;
}

std::vector<std::vector<RankSample>> unpack_calls(std::span<const double> all, size_t nranks,
                                                  size_t calls, size_t iters) {
  const size_t one = packed_size(iters);
  std::vector<std::vector<RankSample>> out(nranks);
  for (size_t r = 0; r < nranks; ++r)
    for (size_t c = 0; c < calls; ++c)
      out[r].push_back(unpack(all.subspan((r * calls + c) * one, one), iters));
  return out;
}

size_t placement_index(Placement p) { return p == kPlacements[0] ? 0 : 1; }

FsdpSummary summarize_fsdp(FsdpPlan plan, const std::vector<std::vector<RankSample>>& by_rank,
                           TimeMode mode) {
  FsdpSummary out;
  bool checked = false;
  int64_t wrong = 0;
  for (size_t i = 0; i < plan.calls.size(); ++i) {
    const FsdpCall& c = plan.calls[i];
    std::vector<RankSample> ranks;
    for (const auto& r : by_rank) ranks.push_back(r.at(i));
    SizeSummary z = summarize_size(c.shape, std::move(ranks), mode);
    const auto& p = z.placement[placement_index(c.placement)];
    out.step_time_us += p.time_us;
    (c.phase == Phase::kForward ? out.forward_time_us : out.backward_time_us) += p.time_us;
    out.step_bytes += c.shape.bytes;
    if (p.wrong >= 0) {
      checked = true;
      wrong += p.wrong;
    }
    out.calls.push_back(std::move(z));
  }
  // Every call is an all-gather or a reduce-scatter: one busbw factor, (n-1)/n, for the step.
  out.step_algbw_gbps = algbw_gbps(static_cast<double>(out.step_bytes), out.step_time_us);
  out.step_busbw_gbps = out.step_algbw_gbps * busbw_factor(Collective::kAllgather, plan.nranks);
  out.wrong = checked ? wrong : -1;
  out.status = wrong > 0 ? "wrong" : "ok";
  out.plan = std::move(plan);
  return out;
}

}  // namespace dtune::comm
