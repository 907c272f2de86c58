// The FSDP step's table (fsdp_table.h). Numbers as nccl-tests prints them (table.h float_text).
#include "benchmarks/comm/fsdp_table.h"

#include "benchmarks/comm/table.h"

namespace dtune::comm {

void print_fsdp_plan(std::FILE* out, const FsdpPlan& plan, const std::string& backend) {
  std::fprintf(out, "#\n# Pattern: fsdp  model: %s (%lld parameters)  shard unit: %s (%zu units)\n",
               plan.model.c_str(), static_cast<long long>(plan.model_parameters),
               plan.shard_unit.per_block ? "block" : (plan.shard_unit.text + " MiB").c_str(),
               plan.units.size());
  std::fprintf(out,
               "#   datatype: %s  reshard after forward: %s  placement: %s (all-gather %s, "
               "reduce-scatter %s)  op: sum  backend: %s\n",
               to_string(plan.dtype).c_str(), to_string(plan.reshard).c_str(),
               to_string(plan.placement).c_str(),
               plan.placement == FsdpPlacement::kOutOfPlace ? "out-of-place" : "in-place",
               plan.placement == FsdpPlacement::kInPlace ? "in-place" : "out-of-place",
               backend.c_str());
  std::fprintf(out, "#\n#%5s  %-10s  %12s  %12s  %12s\n", "unit", "name", "parameters", "padded",
               "size (B)");
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const FsdpUnit& x = plan.units[u];
    std::fprintf(out, "#%5zu  %-10s  %12lld  %12lld  %12zu\n", u, x.name.c_str(),
                 static_cast<long long>(x.parameters), static_cast<long long>(x.padded), x.bytes);
  }
  std::fflush(out);
}

void print_fsdp_calls(std::FILE* out, const FsdpSummary& s) {
  const FsdpPlan& plan = s.plan;
  std::fprintf(out, "#\n#%5s  %8s  %4s  %-10s  %14s  %12s  %12s  %12s  %8s  %7s  %6s  %6s  %6s\n",
               "call", "phase", "unit", "name", "collective", "placement", "size", "count", "type",
               "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "#%5s  %8s  %4s  %-10s  %14s  %12s  %12s  %12s  %8s  %7s  %6s  %6s  %6s\n", "",
               "", "", "", "", "", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (size_t i = 0; i < plan.calls.size(); ++i) {
    const FsdpCall& c = plan.calls[i];
    const auto& p = s.calls[i].placement[placement_index(c.placement)];
    char wrong[32] = "N/A";
    if (p.wrong >= 0) std::snprintf(wrong, sizeof wrong, "%g", static_cast<double>(p.wrong));
    std::fprintf(out, "%6zu  %8s  %4zu  %-10s  %14s  %12s  %12zu  %12zu  %8s  %7s  %6s  %6s  %6s\n",
                 i, to_string(c.phase).c_str(), c.unit, plan.units[c.unit].name.c_str(),
                 to_string(c.shape.collective).c_str(), to_string(c.placement).c_str(),
                 c.shape.bytes, c.shape.count, nccl_tests_name(c.shape.dtype).c_str(),
                 float_text(p.time_us, 7).c_str(), float_text(p.algbw_gbps, 6).c_str(),
                 float_text(p.busbw_gbps, 6).c_str(), wrong);
  }
  size_t gathers = 0;
  for (const FsdpCall& c : plan.calls) gathers += c.shape.collective == Collective::kAllgather;
  // The step's figures: the sum of the calls' reported times (-a), and algbw/busbw of the step's
  // bytes over that time, busbw with the one factor (n-1)/n of all-gather and reduce-scatter.
  std::fprintf(out,
               "#\n# Step: %zu calls (%zu all-gathers, %zu reduce-scatters), %llu B per rank in "
               "the size column\n",
               plan.calls.size(), gathers, plan.calls.size() - gathers,
               static_cast<unsigned long long>(s.step_bytes));
  std::fprintf(out,
               "# Step communication time: %.2f us (forward %.2f us, backward %.2f us), algbw "
               "%.3f GB/s, busbw %.3f GB/s\n",
               s.step_time_us, s.forward_time_us, s.backward_time_us, s.step_algbw_gbps,
               s.step_busbw_gbps);
  std::fflush(out);
}

}  // namespace dtune::comm
