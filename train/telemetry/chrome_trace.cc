// Rank metadata and dtune's own spans added to a Kineto Chrome trace (see chrome_trace.h).
#include "train/telemetry/chrome_trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dtune::train {
namespace {

double steady_us(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

std::string track_name(TraceTrack t, int stage) {
  switch (t) {
    case TraceTrack::kPhases:
      return "dtune phases (CPU side)";
    case TraceTrack::kReductions:
      return "dtune gradient reductions";
    case TraceTrack::kPipeline:
      return "pipeline stage " + std::to_string(stage);
  }
  return "";
}

const char* track_category(TraceTrack t) {
  switch (t) {
    case TraceTrack::kPhases:
      return "dtune_phase";
    case TraceTrack::kReductions:
      return "dtune_comm";
    case TraceTrack::kPipeline:
      return "dtune_pipeline";
  }
  return "";
}

}  // namespace

void finish_chrome_trace(const std::string& path, const TraceRankInfo& info,
                         const std::vector<TraceSpan>& spans, const StepAnchors& anchors) {
  nlohmann::ordered_json trace;  // keeps Kineto's key order
  {
    std::ifstream in(path);
    if (!in) throw Error("profile trace " + path + ": cannot be read back");
    try {
      trace = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::ordered_json::exception& e) {
      throw Error("profile trace " + path + ": not JSON (" + std::string(e.what()) + ")");
    }
  }
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw Error("profile trace " + path + ": no traceEvents array");
  nlohmann::ordered_json& events = trace["traceEvents"];

  // Offset between the trace's clock and the steady clock, from the most tightly bracketed anchor.
  double offset = 0, best_width = -1;
  nlohmann::ordered_json pid;
  const std::string prefix = "ProfilerStep#";
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("name") || !e["name"].is_string())
      continue;
    const std::string name = e["name"].get<std::string>();
    if (name.rfind(prefix, 0) != 0) continue;
    const auto it = anchors.find(std::stoi(name.substr(prefix.size())));
    if (it == anchors.end()) continue;
    const double lo = steady_us(it->second.before), hi = steady_us(it->second.after);
    if (best_width >= 0 && hi - lo >= best_width) continue;
    best_width = hi - lo;
    offset = e["ts"].get<double>() - (lo + hi) / 2;
    pid = e["pid"];
  }
  if (best_width < 0)
    throw Error("profile trace " + path +
                ": no ProfilerStep#N annotation to align dtune's spans with");

  std::vector<TraceTrack> tracks{TraceTrack::kPhases, TraceTrack::kReductions};
  if (info.pipeline_stage >= 0) tracks.push_back(TraceTrack::kPipeline);
  for (TraceTrack t : tracks) {
    const int64_t tid = kTraceTrackTidBase + static_cast<int64_t>(t);
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"name", track_name(t, info.pipeline_stage)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
  }
  for (const auto& s : spans) {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (const auto& [k, v] : s.args) args[k] = v;
    events.push_back({{"ph", "X"},
                      {"cat", track_category(s.track)},
                      {"name", s.name},
                      {"pid", pid},
                      {"tid", kTraceTrackTidBase + static_cast<int64_t>(s.track)},
                      {"ts", steady_us(s.start) + offset},
                      {"dur", std::chrono::duration<double, std::micro>(s.end - s.start).count()},
                      {"args", args}});
  }
  // The rank metadata first, pretty-printed as PyTorch writes it: HTA finds a trace's rank with the
  // regular expression "rank":\s+(\d+) on the first line that has one.
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (trace.contains("schemaVersion")) out["schemaVersion"] = trace["schemaVersion"];
  out["distributedInfo"] = {
      {"backend", info.backend}, {"rank", info.rank}, {"world_size", info.world_size}};
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& [k, v] : info.extra) extra[k] = v;
  out["dtune"] = extra;
  for (auto it = trace.begin(); it != trace.end(); ++it)
    if (!out.contains(it.key())) out[it.key()] = std::move(it.value());

  const std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp);
    file << out.dump(1);
    if (!file.flush()) throw Error("profile trace " + tmp + ": write failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("profile trace " + path + ": rename failed");
}

}  // namespace dtune::train
