// Operator table from profiled events (see op_table.h for the definitions).
#include "train/telemetry/op_table.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace dtune::train {

std::vector<OpRow> build_op_table(const std::vector<ProfiledEvent>& events, OpSort sort) {
  // CPU ops, per thread, in start order (an enclosing op before what it encloses).
  std::vector<size_t> cpu;
  for (size_t i = 0; i < events.size(); ++i)
    if (!events[i].on_device && events[i].end_ns >= events[i].start_ns) cpu.push_back(i);
  std::sort(cpu.begin(), cpu.end(), [&](size_t a, size_t b) {
    const auto &x = events[a], &y = events[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    return x.end_ns > y.end_ns;
  });
  const size_t n = events.size();
  std::vector<long> parent(n, -1);
  std::vector<double> self_cpu(n, 0), self_dev(n, 0), total_dev(n, 0);
  std::vector<size_t> stack;
  uint64_t thread = 0;
  for (size_t i : cpu) {
    const auto& e = events[i];
    if (stack.empty() || e.thread != thread) stack.clear();
    thread = e.thread;
    while (!stack.empty() && events[stack.back()].end_ns <= e.start_ns) stack.pop_back();
    // An op that starts inside another but outlives it is not its child (clock jitter); treat it
    // as a sibling of the enclosing op so self times never go negative.
    while (!stack.empty() && events[stack.back()].end_ns < e.end_ns) stack.pop_back();
    if (!stack.empty()) parent[i] = static_cast<long>(stack.back());
    self_cpu[i] = static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    if (parent[i] >= 0) self_cpu[static_cast<size_t>(parent[i])] -= self_cpu[i];
    stack.push_back(i);
  }
  // Device time goes to the op that launched it, and up its ancestors for the totals.
  std::unordered_map<uint64_t, size_t> by_correlation;
  for (size_t i : cpu)
    if (events[i].correlation != 0) by_correlation[events[i].correlation] = i;
  for (size_t i = 0; i < n; ++i) {
    const auto& e = events[i];
    if (!e.on_device) continue;
    const auto it = by_correlation.find(e.linked_correlation);
    if (it == by_correlation.end()) continue;
    const double us = static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    self_dev[it->second] += us;
    for (long p = static_cast<long>(it->second); p >= 0; p = parent[static_cast<size_t>(p)])
      total_dev[static_cast<size_t>(p)] += us;
  }
  std::map<std::string, OpRow> rows;
  for (size_t i : cpu) {
    OpRow& r = rows[events[i].name];
    r.name = events[i].name;
    ++r.calls;
    r.self_cpu_us += self_cpu[i];
    r.cpu_total_us += static_cast<double>(events[i].end_ns - events[i].start_ns) / 1e3;
    r.self_device_us += self_dev[i];
    r.device_total_us += total_dev[i];
  }
  std::vector<OpRow> out;
  for (auto& kv : rows) out.push_back(std::move(kv.second));
  std::stable_sort(out.begin(), out.end(), [sort](const OpRow& a, const OpRow& b) {
    if (sort == OpSort::kSelfDevice && a.self_device_us != b.self_device_us)
      return a.self_device_us > b.self_device_us;
    return a.self_cpu_us > b.self_cpu_us;
  });
  return out;
}

std::string op_table_to_json(const std::vector<OpRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows)
    j.push_back(
        {r.name, r.calls, r.self_cpu_us, r.cpu_total_us, r.self_device_us, r.device_total_us});
  return j.dump();
}

std::vector<OpRow> op_table_from_json(const std::string& text) {
  std::vector<OpRow> rows;
  for (const auto& j : nlohmann::json::parse(text)) {
    OpRow r;
    r.name = j.at(0).get<std::string>();
    r.calls = j.at(1).get<int64_t>();
    r.self_cpu_us = j.at(2).get<double>();
    r.cpu_total_us = j.at(3).get<double>();
    r.self_device_us = j.at(4).get<double>();
    r.device_total_us = j.at(5).get<double>();
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string format_op_table(const std::vector<OpRow>& rows, size_t top, double window_us,
                            bool device) {
  auto ms = [](double us) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", us / 1e3);
    return std::string(b);
  };
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "# %-60s %9s %11s %11s", "Name", "Self CPU%", "Self CPU ms",
                "CPU tot ms");
  s += line;
  if (device) {
    std::snprintf(line, sizeof line, " %9s %11s %11s", "Self dev%", "Self dev ms", "Dev tot ms");
    s += line;
  }
  s += "   Calls\n";
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const OpRow& r = rows[i];
    std::string name = r.name;
    if (name.size() > 60) name.replace(57, std::string::npos, "...");
    std::snprintf(line, sizeof line, "  %-60s %8.2f%% %11s %11s", name.c_str(),
                  100 * r.self_cpu_us / window_us, ms(r.self_cpu_us).c_str(),
                  ms(r.cpu_total_us).c_str());
    s += line;
    if (device) {
      std::snprintf(line, sizeof line, " %8.2f%% %11s %11s", 100 * r.self_device_us / window_us,
                    ms(r.self_device_us).c_str(), ms(r.device_total_us).c_str());
      s += line;
    }
    std::snprintf(line, sizeof line, " %7lld\n", static_cast<long long>(r.calls));
    s += line;
  }
  return s;
}

}  // namespace dtune::train
