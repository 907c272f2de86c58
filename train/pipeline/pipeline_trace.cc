// The pipeline's one-row-per-stage Chrome trace (see pipeline_trace.h).
#include "train/pipeline/pipeline_trace.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace dtune::train {
namespace {

constexpr int kFields = 9;  // rank, stage, dp_index, activity, step, micro, chunk, peer, start_us
// then end_us: (kFields + 1) doubles a span

std::vector<double> pack(const StagePlace& p, const std::vector<StageSpan>& spans) {
  std::vector<double> v;
  v.reserve(spans.size() * (kFields + 1));
  for (const auto& s : spans)
    v.insert(v.end(), {double(p.rank), double(p.stage), double(p.dp_index),
                       double(static_cast<int>(s.activity)), double(s.step), double(s.micro),
                       double(s.chunk), double(s.peer), s.start_us, s.end_us});
  return v;
}

void write(const std::vector<double>& all, const std::string& path) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  std::map<std::pair<int, int>, int> rows;  // (dp_index, stage) -> rank
  for (size_t i = 0; i + kFields < all.size(); i += kFields + 1)
    rows[{static_cast<int>(all[i + 2]), static_cast<int>(all[i + 1])}] = static_cast<int>(all[i]);
  std::set<int> pipelines;
  for (const auto& [row, rank] : rows) {
    const auto [dp, stage] = row;
    if (pipelines.insert(dp).second) {
      events.push_back({{"ph", "M"},
                        {"name", "process_name"},
                        {"pid", dp},
                        {"tid", 0},
                        {"args", {{"name", "pipeline " + std::to_string(dp)}}}});
      events.push_back({{"ph", "M"},
                        {"name", "process_sort_index"},
                        {"pid", dp},
                        {"tid", 0},
                        {"args", {{"sort_index", dp}}}});
    }
    const std::string name =
        "stage " + std::to_string(stage) + " (rank " + std::to_string(rank) + ")";
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", dp},
                      {"tid", stage},
                      {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_sort_index"},
                      {"pid", dp},
                      {"tid", stage},
                      {"args", {{"sort_index", stage}}}});
  }
  for (size_t i = 0; i + kFields < all.size(); i += kFields + 1) {
    const auto activity = static_cast<StageActivity>(static_cast<int>(all[i + 3]));
    nlohmann::ordered_json args = {{"rank", static_cast<int>(all[i])},
                                   {"step", static_cast<int>(all[i + 4])}};
    if (all[i + 5] >= 0) args["micro_batch"] = static_cast<int>(all[i + 5]);
    args["chunk"] = static_cast<int>(all[i + 6]);
    if (all[i + 7] >= 0) args["peer_stage"] = static_cast<int>(all[i + 7]);
    std::string name = to_string(activity);
    if (all[i + 5] >= 0) name += " " + std::to_string(static_cast<int>(all[i + 5]));
    events.push_back({{"ph", "X"},
                      {"cat", "dtune_pipeline"},
                      {"name", name},
                      {"pid", static_cast<int>(all[i + 2])},
                      {"tid", static_cast<int>(all[i + 1])},
                      {"ts", all[i + 8]},
                      {"dur", all[i + 9] - all[i + 8]},
                      {"args", args}});
  }
  nlohmann::ordered_json out = {{"displayTimeUnit", "ms"}, {"traceEvents", events}};
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp);
    file << out.dump(1);
    if (!file.flush()) throw Error("pipeline trace " + tmp + ": write failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("pipeline trace " + path + ": rename failed");
}

}  // namespace

const char* to_string(StageActivity a) {
  switch (a) {
    case StageActivity::kForward:
      return "forward";
    case StageActivity::kBackward:
      return "backward";
    case StageActivity::kSend:
      return "send";
    case StageActivity::kRecvWait:
      return "recv wait";
    case StageActivity::kSendWait:
      return "send wait";
    case StageActivity::kBackwardWeight:
      return "backward weight";
  }
  return "";
}

void gather_pipeline_trace(MPI_Comm comm, const StagePlace& mine,
                           const std::vector<StageSpan>& spans, const std::string& path) {
  int rank = 0, size = 1;
  DTUNE_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  DTUNE_MPI_CHECK(MPI_Comm_size(comm, &size));
  const std::vector<double> v = pack(mine, spans);
  int n = static_cast<int>(v.size());
  std::vector<int> counts(rank == 0 ? size : 0), offsets(rank == 0 ? size : 0);
  DTUNE_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int r = 0; r < static_cast<int>(counts.size()); ++r) offsets[r] = total, total += counts[r];
  std::vector<double> all(rank == 0 ? total : 0);
  DTUNE_MPI_CHECK(MPI_Gatherv(v.data(), n, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                              MPI_DOUBLE, 0, comm));
  if (rank == 0) write(all, path);
}

}  // namespace dtune::train
