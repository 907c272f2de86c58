// dtune-train's run summary (benchmarks/train/train_summary.h) from a hand-built outcome: warm-up
// and --profile-steps steps stay out of throughput and percentiles, a step's time is its slowest
// rank's, and the data loaders' totals are summed field by field.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "benchmarks/train/train_summary.h"

namespace dtune::train {
namespace {

// Two warm-up steps (slow), then five measured ones, the middle one profiled (slower still).
TrainOutcome outcome(std::vector<bool> profiled) {
  TrainOutcome out;
  out.batch = 4;
  out.training_flops_per_sample = 1e10;
  out.tokens_per_sample = 8;
  for (size_t s = 0; s < profiled.size(); ++s) {
    StepRecord r;
    r.profiled = profiled[s];
    r.skipped = s == 1 || s == 3;  // one in warm-up, one measured
    out.steps.push_back(r);
  }
  return out;
}

Options options() {
  Options o;
  o.warmup_steps = 2;
  o.accum_steps = 3;
  o.peak_tflops = 10;
  return o;
}

DataSummary no_data() {
  return data_summary_from_numbers("synthetic", std::vector<double>(kDataSummaryFields.size()));
}

TEST(TrainSummary, ThroughputLeavesOutWarmupAndProfiledSteps) {
  const TrainOutcome out = outcome({false, false, false, false, true, false, false});
  const std::vector<double> slowest = {1000, 1000, 10, 20, 500, 40, 50};
  const TrainSummary t = summarize_training(options(), 2, out, slowest, no_data(), true);
  EXPECT_EQ(t.used_steps, 4);
  EXPECT_EQ(t.skipped, 1);
  EXPECT_DOUBLE_EQ(t.global_batch, 4 * 2 * 3);
  // 4 steps x 24 samples over 10+20+40+50 ms.
  EXPECT_DOUBLE_EQ(t.samples, 96);
  EXPECT_DOUBLE_EQ(t.seconds, 0.12);
  EXPECT_NEAR(t.samples_per_s, 800, 1e-9);
  EXPECT_NEAR(t.tokens_per_s, 6400, 1e-9);
  EXPECT_DOUBLE_EQ(t.step_ms.p50, 30);
  EXPECT_NEAR(t.p90_ms, 47, 1e-9);
  // 1e10 FLOP x 800 samples/s over 2 devices of 10 TFLOP/s (a peak the run does not exceed: at
  // 1 TFLOP/s, 400%, it would be rejected; CheckedMfu in test_mfu.cc).
  EXPECT_NEAR(t.mfu, 0.4, 1e-9);
  EXPECT_EQ(t.peak.source, "--peak-tflops");
  EXPECT_TRUE(t.mfu_valid);
  EXPECT_DOUBLE_EQ(t.profile_cost.profiled_p50_ms, 500);
  EXPECT_NEAR(t.profile_cost.overhead, 500.0 / 30 - 1, 1e-12);
  EXPECT_EQ(t.status, "ok");
}

TEST(TrainSummary, EveryMeasuredStepProfiledCountsThemAll) {
  const TrainOutcome out = outcome({false, false, true, true});
  const TrainSummary t = summarize_training(
      options(), 1, out, std::vector<double>{1000, 1000, 30, 50}, no_data(), true);
  EXPECT_EQ(t.used_steps, 2);
  EXPECT_DOUBLE_EQ(t.step_ms.p50, 40);
  EXPECT_NEAR(t.samples_per_s, 2 * 12 / 0.08, 1e-9);
  EXPECT_TRUE(std::isnan(t.profile_cost.overhead));
}

TEST(TrainSummary, DataSummariesAddFieldByField) {
  std::vector<double> a(kDataSummaryFields.size()), b(kDataSummaryFields.size());
  for (size_t k = 0; k < a.size(); ++k)
    a[k] = static_cast<double>(k + 1), b[k] = 100.0 * static_cast<double>(k + 1);
  DataSummary sum = data_summary_from_numbers("mine", a);
  EXPECT_EQ(sum.numbers(), a);  // from_numbers inverts numbers()
  sum += data_summary_from_numbers("theirs", b);
  EXPECT_EQ(sum.source, "mine");
  const std::vector<double> n = sum.numbers();
  for (size_t k = 0; k < n.size(); ++k)
    EXPECT_DOUBLE_EQ(n[k], 101.0 * static_cast<double>(k + 1)) << kDataSummaryFields[k];
}

}  // namespace
}  // namespace dtune::train
