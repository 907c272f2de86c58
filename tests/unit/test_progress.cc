// Progress lines (core/progress.h): nothing when not asked for, a stage line at once when asked,
// counted updates at most once a second with the count, total and percentage, and the mode and
// DTUNE_PROGRESS deciding over the terminal test.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "core/progress.h"

namespace dtune {
namespace {

TEST(Progress, ModeAndEnvironmentDecide) {
  EXPECT_TRUE(progress_enabled(ProgressMode::kAlways));
  EXPECT_FALSE(progress_enabled(ProgressMode::kNever));
  ::setenv("DTUNE_PROGRESS", "1", 1);
  EXPECT_TRUE(progress_enabled(ProgressMode::kAuto));
  ::setenv("DTUNE_PROGRESS", "0", 1);
  EXPECT_FALSE(progress_enabled(ProgressMode::kAuto));
  ::unsetenv("DTUNE_PROGRESS");
}

TEST(Progress, QuietUnlessAskedAndAtMostOnceASecond) {
  testing::internal::CaptureStderr();
  Progress quiet("tool: job", "files", 10, ProgressMode::kNever);
  quiet.say("starting");
  quiet.update(5);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  testing::internal::CaptureStderr();
  Progress p("tool: job", "files", 10, ProgressMode::kAlways);
  p.update(1);  // less than a second in: nothing
  p.say("probing batch 64");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  p.update(5, "2 shards written");
  p.update(6);  // right after the last line: nothing
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.find("tool: job: probing batch 64 (0 s)\n"), 0u) << out;
  const size_t line = out.find("tool: job: 5 of 10 files (50%), ");  // then the seconds so far
  ASSERT_NE(line, std::string::npos) << out;
  EXPECT_NE(out.find(" s, 2 shards written\n", line), std::string::npos) << out;
  EXPECT_EQ(out.find("6 of 10"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtune
