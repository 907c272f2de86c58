// Deadlines and the watchdog's scoped guard: a deadline's remaining time and expiry, and a
// DeadlineGuard that arms the watchdog while in scope and disarms it however the scope is left.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "core/deadline.h"
#include "core/watchdog.h"

namespace dtune {
namespace {

using namespace std::chrono_literals;

TEST(Deadline, RemainingAndExpiry) {
  const Clock::time_point before = Clock::now();
  const Deadline d = Deadline::after_s(60);
  EXPECT_GE(d.at(), before + 60s);
  EXPECT_LE(d.at(), Clock::now() + 60s);
  EXPECT_FALSE(d.expired());
  EXPECT_GT(d.remaining(), 59s);
  EXPECT_LE(d.remaining(), 60s);
  const Deadline past(Clock::now() - 1s);
  EXPECT_TRUE(past.expired());
  EXPECT_EQ(past.remaining(), Clock::duration::zero());
  EXPECT_GE(Deadline::after_s(0.5).at(), before + 500ms);
}

class DeadlineGuardTest : public ::testing::Test {
 protected:
  // The watchdog's thread: re-run the test in a fresh process for each death test.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(DeadlineGuardTest, ArmsTheWatchdogInScope) {
  EXPECT_EXIT(
      {
        Watchdog w("dtune-test", false);
        const DeadlineGuard g(w, 0.05, "the planted wait");
        std::this_thread::sleep_for(30s);
      },
      ::testing::ExitedWithCode(kTimeoutExitStatus),
      "the planted wait did not finish within 0.05 s");
}

TEST_F(DeadlineGuardTest, DisarmsWhenTheScopeEndsOrThrows) {
  EXPECT_EXIT(
      {
        Watchdog w("dtune-test", false);
        { const DeadlineGuard g(w, 0.05, "a wait that returned"); }
        try {
          const DeadlineGuard g(w, 0.05, "a wait that threw");
          throw std::runtime_error("timeout");
        } catch (const std::runtime_error&) {
        }
        std::this_thread::sleep_for(500ms);  // ten times the timeout: an armed watchdog fires
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dtune
