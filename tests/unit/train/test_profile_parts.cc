// The profiler's torch-free parts: self and total times of nested operators (CPU and device), the
// JSON round trip used to gather tables, and finishing a Chrome trace (rank metadata, dtune's spans
// aligned to the ProfilerStep annotations, bad files refused).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/telemetry/chrome_trace.h"
#include "train/telemetry/op_table.h"

namespace dtune::train {
namespace {

const OpRow& row(const std::vector<OpRow>& t, const std::string& name) {
  for (const auto& r : t)
    if (r.name == name) return r;
  throw std::runtime_error("no row " + name);
}

ProfiledEvent cpu(const std::string& name, int64_t start_us, int64_t end_us, uint64_t corr = 0,
                  uint64_t thread = 1) {
  ProfiledEvent e;
  e.name = name;
  e.thread = thread;
  e.start_ns = start_us * 1000;
  e.end_ns = end_us * 1000;
  e.correlation = corr;
  return e;
}

ProfiledEvent kernel(const std::string& name, int64_t start_us, int64_t end_us,
                     uint64_t launched_by) {
  ProfiledEvent e = cpu(name, start_us, end_us, 0, 99);
  e.on_device = true;
  e.linked_correlation = launched_by;
  return e;
}

TEST(OpTable, SelfCpuTimeSubtractsDirectChildren) {
  // linear [0,100) holds addmm [10,60) which holds copy_ [20,30); another thread runs mm [0,40).
  const auto t = build_op_table({cpu("aten::linear", 0, 100), cpu("aten::addmm", 10, 60),
                                 cpu("aten::copy_", 20, 30), cpu("aten::mm", 0, 40, 0, 2)},
                                OpSort::kSelfCpu);
  EXPECT_DOUBLE_EQ(row(t, "aten::linear").self_cpu_us, 50);
  EXPECT_DOUBLE_EQ(row(t, "aten::linear").cpu_total_us, 100);
  EXPECT_DOUBLE_EQ(row(t, "aten::addmm").self_cpu_us, 40);
  EXPECT_DOUBLE_EQ(row(t, "aten::copy_").self_cpu_us, 10);
  EXPECT_DOUBLE_EQ(row(t, "aten::mm").self_cpu_us, 40);  // not a child: another thread
  // Sorted by self CPU time: linear 50, then addmm and mm (40, by name order of the tie), copy_.
  EXPECT_EQ(t.front().name, "aten::linear");
  EXPECT_EQ(t.back().name, "aten::copy_");
  double self = 0;
  for (const auto& r : t) self += r.self_cpu_us;
  EXPECT_DOUBLE_EQ(self, 140);  // the union of the busy time on both threads
}

TEST(OpTable, CallsAggregateByName) {
  const auto t =
      build_op_table({cpu("aten::mm", 0, 10), cpu("aten::mm", 20, 25), cpu("aten::add_", 30, 31)},
                     OpSort::kSelfCpu);
  EXPECT_EQ(row(t, "aten::mm").calls, 2);
  EXPECT_DOUBLE_EQ(row(t, "aten::mm").self_cpu_us, 15);
}

TEST(OpTable, DeviceTimeGoesToTheLaunchingOpAndUpToItsParents) {
  const auto t = build_op_table(
      {cpu("aten::linear", 0, 100, 1), cpu("aten::addmm", 10, 60, 2), cpu("aten::relu", 70, 80, 3),
       kernel("gemm", 200, 290, 2), kernel("relu_k", 300, 305, 3), kernel("orphan", 400, 401, 77)},
      OpSort::kSelfDevice);
  EXPECT_DOUBLE_EQ(row(t, "aten::addmm").self_device_us, 90);
  EXPECT_DOUBLE_EQ(row(t, "aten::relu").self_device_us, 5);
  EXPECT_DOUBLE_EQ(row(t, "aten::linear").self_device_us, 0);
  EXPECT_DOUBLE_EQ(row(t, "aten::linear").device_total_us, 95);  // addmm and relu are inside it
  EXPECT_EQ(t.front().name, "aten::addmm");
  EXPECT_EQ(t.size(), 3u);  // kernels are not operators
}

TEST(OpTable, OverlappingButNotNestedEventsNeverGoNegative) {
  // b starts inside a but ends after it (clock jitter): siblings, not parent and child.
  const auto t = build_op_table({cpu("a", 0, 10), cpu("b", 5, 20)}, OpSort::kSelfCpu);
  EXPECT_DOUBLE_EQ(row(t, "a").self_cpu_us, 10);
  EXPECT_DOUBLE_EQ(row(t, "b").self_cpu_us, 15);
}

TEST(OpTable, JsonRoundTripAndText) {
  const auto t =
      build_op_table({cpu("aten::mm", 0, 1000), cpu("aten::add_", 1000, 1500)}, OpSort::kSelfCpu);
  const auto back = op_table_from_json(op_table_to_json(t));
  ASSERT_EQ(back.size(), t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(back[i].name, t[i].name);
    EXPECT_EQ(back[i].calls, t[i].calls);
    EXPECT_DOUBLE_EQ(back[i].self_cpu_us, t[i].self_cpu_us);
  }
  const std::string text = format_op_table(t, 1, 2000, false);
  EXPECT_NE(text.find("aten::mm"), std::string::npos);
  EXPECT_NE(text.find("50.00%"), std::string::npos);
  EXPECT_EQ(text.find("aten::add_"), std::string::npos);  // top 1 only
}

class ChromeTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("dtune_trace_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "rank1.pt.trace.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(path_) << text; }
  nlohmann::json read() { return nlohmann::json::parse(std::ifstream(path_)); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(ChromeTrace, AddsRankMetadataAndAlignsSpansToTheStepAnnotations) {
  // The trace's clock runs 5,000,000 us ahead of the steady clock's epoch count.
  using namespace std::chrono;
  // Step 4's anchor is bracketed within 2 us, step 5's (preempted) within 900 us: step 4 wins.
  const StepAnchor t0{steady_clock::time_point{microseconds(999)},
                      steady_clock::time_point{microseconds(1001)}};
  const StepAnchor t1{steady_clock::time_point{microseconds(2100)},
                      steady_clock::time_point{microseconds(3000)}};
  write(R"({"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 42, "tid": 42, "ts": 5001000, "dur": 2000},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 42, "tid": 42, "ts": 5003000, "dur": 2000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 42, "tid": 42, "ts": 5001100, "dur": 10}]})");
  TraceSpan fwd{"forward",
                TraceTrack::kPhases,
                steady_clock::time_point{microseconds(1100)},
                steady_clock::time_point{microseconds(1600)},
                {}};
  TraceSpan red{"MPI_Allreduce bucket 0",
                TraceTrack::kReductions,
                steady_clock::time_point{microseconds(1500)},
                steady_clock::time_point{microseconds(1900)},
                {{"bucket", 0}, {"bytes", 4096}}};
  finish_chrome_trace(path_, {1, 4, "mpi", {{"model", "gpt2-tiny"}}}, {fwd, red},
                      {{4, t0}, {5, t1}});

  // HTA finds the rank with this regular expression, line by line.
  std::ifstream in(path_);
  std::string line;
  bool found = false;
  while (std::getline(in, line) && !found) found = line.find("\"rank\": 1") != std::string::npos;
  EXPECT_TRUE(found);
  const nlohmann::json j = read();
  EXPECT_EQ(j["distributedInfo"]["rank"], 1);
  EXPECT_EQ(j["distributedInfo"]["world_size"], 4);
  EXPECT_EQ(j["distributedInfo"]["backend"], "mpi");
  EXPECT_EQ(j["dtune"]["model"], "gpt2-tiny");
  int spans = 0, names = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") ++names;
    if (e["name"] == "forward") {
      ++spans;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 5001100);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 500);
      EXPECT_EQ(e["pid"], 42);
      EXPECT_EQ(e["tid"], kTraceTrackTidBase);
      EXPECT_EQ(e["cat"], "dtune_phase");
    }
    if (e["name"] == "MPI_Allreduce bucket 0") {
      ++spans;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 5001500);
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_EQ(e["tid"], kTraceTrackTidBase + 1);
      EXPECT_EQ(e["cat"], "dtune_comm");
    }
  }
  EXPECT_EQ(spans, 2);
  EXPECT_EQ(names, 2);
  EXPECT_EQ(j["traceEvents"].size(),
            3u + 2 + 4);  // the original three, two spans, two rows x 2 metadata
}

TEST_F(ChromeTrace, RefusesFilesItCannotAlign) {
  write("not json");
  EXPECT_THROW(finish_chrome_trace(path_, {}, {}, {}), Error);
  write(R"({"traceEvents": 3})");
  EXPECT_THROW(finish_chrome_trace(path_, {}, {}, {}), Error);
  write(
      R"({"traceEvents": [{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})");
  EXPECT_THROW(finish_chrome_trace(path_, {}, {}, {{0, {}}}), Error);  // no ProfilerStep#N
}

}  // namespace
}  // namespace dtune::train
