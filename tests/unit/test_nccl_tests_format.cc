// nccl-tests' number formats and JSON helpers (NVIDIA/nccl-tests src/util.cu): the table's
// getFloatStr widths, computeIterStats' percentile and stdev rules, and the -J file names.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "benchmarks/comm/nccl_tests_json.h"
#include "benchmarks/comm/table.h"

namespace dtune::comm {
namespace {

TEST(NcclTestsFormat, FloatTextNeverExceedsItsColumn) {
  EXPECT_EQ(float_text(12.3456, 6), " 12.35");
  EXPECT_EQ(float_text(123.456, 6), "123.46");
  EXPECT_EQ(float_text(1234.56, 6), "1234.6");    // one decimal once two do not fit
  EXPECT_EQ(float_text(12345.67, 6), " 12346");   // busbw 12345.67 GB/s: no decimals
  EXPECT_EQ(float_text(1234567.0, 6), " 1e+06");  // past the width: an exponent
  EXPECT_EQ(float_text(12345.67, 7), "12345.7");  // time column
  EXPECT_EQ(float_text(123456789.0, 7), "1.2e+08");
  for (double v : {0.0, 1.0, 99.999, 1e3, 9.99e5, 1e6, 1e9, 1e15})
    for (int w : {6, 7})
      EXPECT_EQ(float_text(v, w).size(), static_cast<size_t>(w)) << v << " " << w;
}

TEST(NcclTestsFormat, IterStatsFollowComputeIterStats) {
  // Unsorted on purpose; sorted: 1..10.
  const std::vector<double> t = {10, 2, 9, 1, 8, 3, 7, 4, 6, 5};
  const IterStats s = nccl_tests_iter_stats(t);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(s.avg, 5.5);
  EXPECT_DOUBLE_EQ(s.p50, 6);   // sorted[n/2], not the interpolated 5.5
  EXPECT_DOUBLE_EQ(s.p95, 10);  // min(n-1, ceil(9.5) - 1) = 9
  EXPECT_DOUBLE_EQ(s.p99, 10);
  EXPECT_DOUBLE_EQ(s.stdev, std::sqrt(8.25));  // population: sum of squares 82.5 / 10
  const std::vector<double> hundred = [] {
    std::vector<double> v;
    for (int i = 1; i <= 100; ++i) v.push_back(i);
    return v;
  }();
  const IterStats h = nccl_tests_iter_stats(hundred);
  EXPECT_DOUBLE_EQ(h.p95, 95);  // index (100*95+99)/100 - 1 = 94
  EXPECT_DOUBLE_EQ(h.p99, 99);
  EXPECT_DOUBLE_EQ(h.p50, 51);
}

TEST(NcclTestsFormat, OneFilePerCollective) {
  EXPECT_EQ(json_paths("out/r.json", {Collective::kAllreduce}),
            std::vector<std::string>{"out/r.json"});
  EXPECT_EQ(json_paths("r.JSON", {Collective::kAllreduce, Collective::kReduceScatter}),
            (std::vector<std::string>{"r-allreduce.JSON", "r-reduce_scatter.JSON"}));
}

TEST(NcclTestsFormat, DeviceLineAsNcclTestsParsesIt) {
  const JsonDevice d =
      make_json_device(3, 4242, "node7.cluster.local", "cuda:1 NVIDIA H200 (0000:1b:00.0)");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.pid, 4242);
  EXPECT_EQ(d.hostname, "node7");
  EXPECT_EQ(d.device, 1);
  EXPECT_EQ(d.device_hex, "0000:1b:00");
  EXPECT_EQ(d.device_info, "NVIDIA H200");
  const JsonDevice c = make_json_device(0, 1, "host", "cpu");
  EXPECT_EQ(c.device, -1);
  EXPECT_EQ(c.device_hex, "");
  EXPECT_EQ(c.device_info, "cpu");
}

TEST(NcclTestsFormat, NcclVersionCode) {
  EXPECT_EQ(nccl_version_code("NCCL 2.27.3"), 22703);
  EXPECT_EQ(nccl_version_code("2.9.0"), 20900);
  EXPECT_EQ(nccl_version_code(""), 0);
}

}  // namespace
}  // namespace dtune::comm
