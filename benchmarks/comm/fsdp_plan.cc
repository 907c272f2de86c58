// The FSDP step's units and calls (fsdp_plan.h).
#include "benchmarks/comm/fsdp_plan.h"

#include "core/error.h"
#include "models/bucket_plan.h"

namespace dtune::comm {

const std::vector<EnumName<Reshard>>& reshard_names() {
  static const std::vector<EnumName<Reshard>> k = {{Reshard::kOff, "off"}, {Reshard::kOn, "on"}};
  return k;
}
const std::vector<EnumName<FsdpPlacement>>& fsdp_placement_names() {
  static const std::vector<EnumName<FsdpPlacement>> k = {
      {FsdpPlacement::kFsdp2, "fsdp2"},
      {FsdpPlacement::kOutOfPlace, "out-of-place"},
      {FsdpPlacement::kInPlace, "in-place"}};
  return k;
}
const std::vector<EnumName<Phase>>& phase_names() {
  static const std::vector<EnumName<Phase>> k = {{Phase::kForward, "forward"},
                                                 {Phase::kBackward, "backward"}};
  return k;
}
std::string to_string(Reshard r) { return name_of(reshard_names(), r); }
std::string to_string(FsdpPlacement p) { return name_of(fsdp_placement_names(), p); }
std::string to_string(Phase p) { return name_of(phase_names(), p); }

namespace {

FsdpUnit padded_unit(std::string name, int64_t parameters, Dtype dtype, int nranks) {
  const int64_t n = nranks;
  const int64_t padded = (parameters + n - 1) / n * n;
  return {std::move(name), parameters, padded, static_cast<size_t>(padded) * dtype_size(dtype)};
}

}  // namespace

std::vector<FsdpUnit> shard_units(const models::ModelSize& size, const ShardUnit& unit, Dtype dtype,
                                  int nranks) {
  std::vector<FsdpUnit> out;
  if (unit.per_block) {
    for (const auto& b : size.units)
      out.push_back(padded_unit(b.name, b.parameters, dtype, nranks));
    return out;
  }
  // Size units: whole parameters, cut as buckets are (reverse order, each at most the cap), then
  // put in forward order.
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  const int64_t cap = unit.cap_bytes();
  if (cap < elem)
    throw UsageError("--shard-unit " + unit.text + ": smaller than one " + to_string(dtype) +
                     " element; give a larger size");
  std::vector<int64_t> bytes;
  for (int64_t n : size.param_elems) bytes.push_back(n * elem);
  const models::BucketLayout cut = models::plan_buckets(bytes, cap, cap);
  if (cut.params.size() > kMaxFsdpUnits)
    throw UsageError("--shard-unit " + unit.text + " cuts the model into " +
                     std::to_string(cut.params.size()) + " units (at most " +
                     std::to_string(kMaxFsdpUnits) + "): give a larger size");
  for (size_t b = cut.params.size(); b-- > 0;)
    out.push_back(
        padded_unit("part." + std::to_string(out.size()), cut.bytes[b] / elem, dtype, nranks));
  return out;
}

std::vector<FsdpCall> fsdp_step_calls(const std::vector<FsdpUnit>& units, Dtype dtype, int nranks,
                                      Reshard reshard, FsdpPlacement placement) {
  const auto where = [placement](Collective c) {
    if (placement == FsdpPlacement::kOutOfPlace) return Placement::kOutOfPlace;
    if (placement == FsdpPlacement::kInPlace) return Placement::kInPlace;
    return c == Collective::kAllgather ? Placement::kInPlace : Placement::kOutOfPlace;
  };
  const auto call = [&](Phase phase, size_t u, Collective c) {
    return FsdpCall{phase, u, where(c),
                    make_shape(c, dtype, ReduceOp::kSum, 0, nranks, units[u].bytes)};
  };
  std::vector<FsdpCall> out;
  for (size_t u = 0; u < units.size(); ++u)
    out.push_back(call(Phase::kForward, u, Collective::kAllgather));
  for (size_t u = units.size(); u-- > 0;) {
    if (reshard == Reshard::kOn) out.push_back(call(Phase::kBackward, u, Collective::kAllgather));
    out.push_back(call(Phase::kBackward, u, Collective::kReduceScatter));
  }
  return out;
}

FsdpPlan make_fsdp_plan(const std::string& model, const ShardUnit& unit, Dtype dtype, int nranks,
                        Reshard reshard, FsdpPlacement placement) {
  const models::ModelSize size = models::model_size(model, models::ModelOptions{});
  FsdpPlan p{model, size.parameters, unit, dtype, reshard, placement, nranks, {}, {}};
  p.units = shard_units(size, unit, dtype, nranks);
  p.calls = fsdp_step_calls(p.units, dtype, nranks, reshard, placement);
  return p;
}

}  // namespace dtune::comm
