// The one timing path (train/device_timeline.h) as the CPU runs it, the same object the pipeline,
// the phase clock, the gradient timer and the gemm probe use on a GPU with CUDA events: marks are
// times since the origin, in order, re-readable; the phase clock's phases tile the step exactly.
// Bounds on sleeps are lower bounds only (a loaded machine can only make them longer).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "train/device_timeline.h"
#include "train/phase_clock.h"

namespace dtune::train {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(DeviceTimeline, HostMarksAreTimesSinceTheOriginInOrder) {
  const auto timeline = make_timeline(-1);
  EXPECT_EQ(timeline->source(), "steady clock");
  const Clock::time_point origin = Clock::now() - std::chrono::milliseconds(5);
  timeline->begin(origin);
  EXPECT_EQ(timeline->mark(), 0u);
  sleep_ms(20);
  EXPECT_EQ(timeline->mark(), 1u);
  std::vector<double> ms = timeline->read_ms();
  ASSERT_EQ(ms.size(), 2u);
  EXPECT_GE(ms[0], 5.0);                  // the origin lies 5 ms before begin()
  EXPECT_GE(between_ms(ms, 0, 1), 20.0);  // the sleep between the marks
  EXPECT_EQ(timeline->mark(), 2u);        // marks go on after a read...
  const std::vector<double> again = timeline->read_ms();
  ASSERT_EQ(again.size(), 3u);  // ...and a read returns them all
  EXPECT_EQ(again[0], ms[0]);
  EXPECT_EQ(again[1], ms[1]);
  EXPECT_GE(again[2], again[1]);
  timeline->begin();  // a new set starts empty
  EXPECT_TRUE(timeline->read_ms().empty());
  EXPECT_EQ(timeline->mark(), 0u);
}

TEST(PhaseClock, PhasesTileTheStepOverTheTimeline) {
  const auto clock = make_phase_clock(make_timeline(-1));
  clock->begin_step();
  clock->mark(Phase::kData);
  sleep_ms(15);
  clock->mark(Phase::kForward);
  clock->mark(Phase::kComm);
  sleep_ms(10);
  clock->mark(Phase::kForward);  // a second micro-step adds to the same phase
  double total = 0;
  const PhaseTimes t = clock->end_step(total);
  EXPECT_GE(t[static_cast<size_t>(Phase::kForward)], 25.0);
  double sum = 0;
  for (double x : t) sum += x;
  EXPECT_NEAR(sum, total, 1e-9 * total);
  const auto& iv = clock->intervals();
  ASSERT_EQ(iv.size(), 4u);
  EXPECT_EQ(iv[0].begin_ms, 0.0);
  for (size_t i = 1; i < iv.size(); ++i) EXPECT_EQ(iv[i].begin_ms, iv[i - 1].end_ms);
  EXPECT_EQ(iv.back().end_ms, total);
  EXPECT_EQ(iv[1].phase, Phase::kForward);
  EXPECT_GE(iv[1].end_ms - iv[1].begin_ms, 15.0);
}

TEST(PhaseClock, TotalOnlyKeepsTheTotalAndNoPhases) {
  const auto clock = make_total_only_clock(make_phase_clock(make_timeline(-1)));
  clock->begin_step();
  clock->mark(Phase::kForward);
  sleep_ms(10);
  double total = 0;
  const PhaseTimes t = clock->end_step(total);
  for (double x : t) EXPECT_EQ(x, 0.0);
  EXPECT_GE(total, 10.0);
  EXPECT_TRUE(clock->intervals().empty());
}

}  // namespace
}  // namespace dtune::train
