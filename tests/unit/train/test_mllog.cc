// MLPerf log lines in the mlperf-logging package's exact bytes. The expected strings are what
// Python 3.11 prints for the same values (repr(float), json.dumps, mllog._encode_log); the smoke
// test (tests/smoke/test_train_logs.py) re-encodes dtune-train's own lines with the package itself.
#include <gtest/gtest.h>

#include <limits>

#include "train/telemetry/mllog.h"

namespace dtune::train {
namespace {

TEST(Mllog, FloatsAsPythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {1e15, "1000000000000000.0"},  // nlohmann writes 1e+15 here
      {1e16, "1e+16"},
      {9999999999999998.0, "9999999999999998.0"},
      {0.0001, "0.0001"},
      {1e-05, "1e-05"},
      {123.0, "123.0"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {0.1, "0.1"},
      {1.0 / 3, "0.3333333333333333"},
      {5e-324, "5e-324"},
      {1.7976931348623157e+308, "1.7976931348623157e+308"},
      {2.5e-07, "2.5e-07"},
      {1e22, "1e+22"},
      {12.5, "12.5"},
      {-1.5e-10, "-1.5e-10"},
      {100.0, "100.0"},
      {1e100, "1e+100"},
      {123456789012345.6, "123456789012345.6"},
      {0.3 + 1e-16, "0.3000000000000001"},
      {std::numeric_limits<double>::quiet_NaN(), "NaN"},
      {std::numeric_limits<double>::infinity(), "Infinity"},
      {-std::numeric_limits<double>::infinity(), "-Infinity"},
  };
  for (const auto& [v, want] : cases) EXPECT_EQ(python_float_repr(v), want);
}

TEST(Mllog, JsonAsPythonDumps) {
  MllogJson v = MllogJson::object();
  v["b"] =
      MllogJson::array({1, 2.0, -3, true, false, nullptr, MllogJson::array(), MllogJson::object()});
  v["a"] = "q\"\\\n\r\t\b\f\x01\x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";  // é € 😀 in UTF-8
  EXPECT_EQ(
      python_json_dumps(v),
      R"({"b": [1, 2.0, -3, true, false, null, [], {}], "a": "q\"\\\n\r\t\b\f\u0001\u007f\u00e9\u20ac\ud83d\ude00"})");
}

TEST(Mllog, LinesAsEncodeLog) {
  EXPECT_EQ(
      mllog_line(1700000000123, "POINT_IN_TIME", "tracked_stats", {{"throughput", 1234.5}},
                 {{"step", 12}}, "benchmarks/train/main.cc", 42),
      R"(:::MLLOG {"namespace": "", "time_ms": 1700000000123, "event_type": "POINT_IN_TIME", "key": )"
      R"("tracked_stats", "value": {"throughput": 1234.5}, "metadata": {"file": "benchmarks/train/main.cc", )"
      R"("lineno": 42, "step": 12}})");
  EXPECT_EQ(
      mllog_line(1700000000000, "INTERVAL_START", "run_start", nullptr, nullptr, "a.cc", 1),
      R"(:::MLLOG {"namespace": "", "time_ms": 1700000000000, "event_type": "INTERVAL_START", "key": )"
      R"("run_start", "value": null, "metadata": {"file": "a.cc", "lineno": 1}})");
  // A caller's "lineno" replaces the call site's in place, as dict.update does.
  EXPECT_EQ(
      mllog_line(1, "POINT_IN_TIME", "opt_base_learning_rate", 1e-05, {{"lineno", 7}, {"x", "y"}},
                 "x", 2),
      R"(:::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": )"
      R"("opt_base_learning_rate", "value": 1e-05, "metadata": {"file": "x", "lineno": 7, "x": "y"}})");
}

}  // namespace
}  // namespace dtune::train
