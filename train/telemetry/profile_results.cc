// Gathering, printing and storing the --profile-steps results (see profile_results.h).
#include "train/telemetry/profile_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/gather.h"
#include "core/h5.h"

namespace dtune::train {

std::vector<ProfileSummary> gather_profiles(MPI_Comm comm, const ProfileSummary& mine) {
  const nlohmann::json j = {{"ran", mine.ran},
                            {"first_step", mine.first_step},
                            {"steps", mine.steps},
                            {"device", mine.device},
                            {"window_us", mine.window_us},
                            {"finish_ms", mine.finish_ms},
                            {"trace_path", mine.trace_path},
                            {"table", op_table_to_json(mine.table)}};
  std::vector<ProfileSummary> all;
  for (const std::string& text : gather_strings(comm, j.dump())) {
    const nlohmann::json r = nlohmann::json::parse(text);
    ProfileSummary s;
    s.ran = r.at("ran").get<bool>();
    s.first_step = r.at("first_step").get<int>();
    s.steps = r.at("steps").get<int>();
    s.device = r.at("device").get<bool>();
    s.window_us = r.at("window_us").get<double>();
    s.finish_ms = r.at("finish_ms").get<double>();
    s.trace_path = r.at("trace_path").get<std::string>();
    s.table = op_table_from_json(r.at("table").get<std::string>());
    all.push_back(std::move(s));
  }
  return all;
}

void print_profile(const std::vector<ProfileSummary>& all, const ProfileOverhead& cost,
                   size_t top) {
  const ProfileSummary& p = all.at(0);
  double self_sum = 0;
  for (const auto& r : p.table) self_sum += p.device ? r.self_device_us : r.self_cpu_us;
  std::printf(
      "# profile: steps %d-%d on %zu ranks; rank 0's operators by self %s time (top %zu of %zu); "
      "window %.2f ms, self times add up to %.1f%% of it\n",
      p.first_step, p.first_step + p.steps - 1, all.size(), p.device ? "device" : "CPU",
      std::min(top, p.table.size()), p.table.size(), p.window_us / 1e3,
      100 * self_sum / p.window_us);
  std::fputs(format_op_table(p.table, top, p.window_us, p.device).c_str(), stdout);
  if (std::isnan(cost.overhead))
    std::printf(
        "# profiler overhead: n/a (every measured step was profiled; profiled step p50 %.2f ms)\n",
        cost.profiled_p50_ms);
  else
    std::printf(
        "# profiler overhead: %+.1f%% (step p50 %.2f ms profiled vs %.2f ms not; those steps are "
        "left "
        "out of the throughput)\n",
        100 * cost.overhead, cost.profiled_p50_ms, cost.unprofiled_p50_ms);
  std::printf("# traces: %s (rank 0; one per rank)\n", p.trace_path.c_str());
}

void write_profile(hid_t run_group, const std::vector<ProfileSummary>& all,
                   const ProfileOverhead& cost) {
  h5::Handle g = h5::create_group(run_group, "profile");
  const ProfileSummary& p0 = all.at(0);
  h5::write_attr(g.get(), "first_step", p0.first_step);
  h5::write_attr(g.get(), "steps", p0.steps);
  h5::write_attr(g.get(), "sort_by", p0.device ? "self_device_us" : "self_cpu_us");
  h5::write_attr(g.get(), "profiler",
                 "LibTorch Kineto (torch::autograd::profiler::enableProfiler)");
  h5::write_attr(g.get(), "overhead", cost.overhead);
  h5::write_attr(g.get(), "profiled_step_p50_ms", cost.profiled_p50_ms);
  h5::write_attr(g.get(), "unprofiled_step_p50_ms", cost.unprofiled_p50_ms);
  std::vector<double> window, finish;
  std::vector<std::string> traces;
  for (const auto& p : all) {
    window.push_back(p.window_us);
    finish.push_back(p.finish_ms);
    traces.push_back(p.trace_path);
  }
  h5::write_dataset(g.get(), "window_us", {all.size()}, window.data());
  h5::write_dataset(g.get(), "finish_ms", {all.size()}, finish.data());
  h5::write_strings(g.get(), "trace_path", traces);
  for (size_t r = 0; r < all.size(); ++r) {
    h5::Handle rg = h5::create_group(g.get(), "rank" + std::to_string(r));
    const auto& t = all[r].table;
    std::vector<std::string> names;
    std::vector<int64_t> calls;
    std::vector<double> self_cpu, cpu_total, self_dev, dev_total;
    for (const auto& row : t) {
      names.push_back(row.name);
      calls.push_back(row.calls);
      self_cpu.push_back(row.self_cpu_us);
      cpu_total.push_back(row.cpu_total_us);
      self_dev.push_back(row.self_device_us);
      dev_total.push_back(row.device_total_us);
    }
    h5::write_strings(rg.get(), "name", names);
    if (t.empty()) continue;
    h5::write_dataset(rg.get(), "calls", {t.size()}, calls.data());
    h5::write_dataset(rg.get(), "self_cpu_us", {t.size()}, self_cpu.data());
    h5::write_dataset(rg.get(), "cpu_total_us", {t.size()}, cpu_total.data());
    h5::write_dataset(rg.get(), "self_device_us", {t.size()}, self_dev.data());
    h5::write_dataset(rg.get(), "device_total_us", {t.size()}, dev_total.data());
  }
}

}  // namespace dtune::train
