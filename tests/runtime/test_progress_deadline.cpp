// The measured deadline of the progress watchdog (runtime/train/progress_watchdog.h): start-up's
// deadline until the warm-up is over, then max(timeout_min_s, factor x p99 of the last 100), so
// that a rank slowed step by step carries its deadline with it and a sudden stall does not.
#include <algorithm>

#include <gtest/gtest.h>

#include "runtime/train/progress_watchdog.h"

namespace sluice::runtime {
namespace {

ProgressTimeouts timeouts() {
  ProgressTimeouts t;
  t.measured = true;
  t.factor = 5;
  t.min_s = 2;
  t.startup_s = 600;
  t.warmup_steps = 3;
  return t;
}

TEST(ProgressDeadline, StartUpsDeadlineUntilTheWarmUpStepsAreOver) {
  MeasuredDeadline deadline(timeouts(), 3);
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 600);
  EXPECT_EQ(deadline.to_json()["from"], "startup_timeout_s");
  for (double s : {30.0, 20.0, 10.0}) deadline.add(s);  // the warm-up: counted, not kept
  EXPECT_EQ(deadline.measured(), 3);
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 600);
  deadline.add(1.0);
  EXPECT_DOUBLE_EQ(deadline.p99_s(), 1.0) << "the warm-up's slow steps are not in the window";
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 5.0);
  EXPECT_EQ(deadline.to_json()["from"], "measured");
}

TEST(ProgressDeadline, NeverBelowTheMinimum) {
  MeasuredDeadline deadline(timeouts(), 0);
  deadline.add(0.01);
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 2.0);
  EXPECT_EQ(deadline.to_json()["from"], "timeout_min_s");
}

TEST(ProgressDeadline, TheP99OfTheLastHundredFollowsAGradualSlowdown) {
  MeasuredDeadline deadline(timeouts(), 0);
  for (int i = 0; i < 200; ++i) deadline.add(1.0);
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 5.0);
  // One step of 4 s among 100: the p99 (nearest rank) of 100 is the second largest.
  deadline.add(4.0);
  EXPECT_DOUBLE_EQ(deadline.p99_s(), 1.0);
  deadline.add(4.0);
  EXPECT_DOUBLE_EQ(deadline.p99_s(), 4.0);
  // Halving the CPU share twice: each step well inside the deadline its predecessors set.
  double longest_ratio = 0;
  for (double step : {2.0, 4.0, 8.0}) {
    for (int i = 0; i < 100; ++i) {
      longest_ratio = std::max(longest_ratio, step / deadline.deadline_s());
      deadline.add(step);
    }
  }
  EXPECT_LT(longest_ratio, 1.0);
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 40.0);
  // The window forgets: 100 fast steps later the deadline is the fast one again.
  for (int i = 0; i < 100; ++i) deadline.add(1.0);
  EXPECT_DOUBLE_EQ(deadline.deadline_s(), 5.0);
}

}  // namespace
}  // namespace sluice::runtime
