// PollBackoff (common/poll_backoff.h): the pauses of a polled wait, planned at given times so that
// no test depends on the clock of a busy machine.
#include <gtest/gtest.h>

#include <chrono>

#include "common/poll_backoff.h"

namespace {

using namespace std::chrono_literals;
using sluice::Clock;
using sluice::PollBackoff;

std::chrono::microseconds us(Clock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d); }

TEST(PollBackoff, SpinsThenSleepsFrom20usDoublingToOneMillisecond) {
  const auto start = Clock::now();
  PollBackoff backoff(PollBackoff::default_max_sleep, start);
  for (int i = 0; i < PollBackoff::spin_polls; ++i) EXPECT_EQ(backoff.plan(start + 10us), Clock::duration::zero()) << i;
  const std::chrono::microseconds expected[] = {20us, 40us, 80us, 160us, 320us, 640us, 1000us, 1000us};
  for (const auto e : expected) EXPECT_EQ(us(backoff.plan(start + 10ms)), e);
}

TEST(PollBackoff, SpinEndsAfterItsTimeEvenWithFewPolls) {
  const auto start = Clock::now();
  PollBackoff backoff(PollBackoff::default_max_sleep, start);
  EXPECT_EQ(backoff.plan(start + 10us), Clock::duration::zero());
  EXPECT_EQ(us(backoff.plan(start + 300us)), 20us);  // a poll that took long (a loaded machine) ends the spin
  EXPECT_EQ(us(backoff.plan(start + 301us)), 40us);  // and it does not come back until reset()
}

TEST(PollBackoff, LongWaitsSleepAThirtySecondOfTheWaitUpToTheMaximum) {
  const auto start = Clock::now();
  PollBackoff backoff(20ms, start);
  for (int i = 0; i < 20; ++i) backoff.plan(start + 1ms);
  EXPECT_EQ(us(backoff.plan(start + 64ms)), 1000us);  // 64 ms / 32 = 2 ms: one doubling at a time
  EXPECT_EQ(us(backoff.plan(start + 64ms)), 2000us);
  EXPECT_EQ(us(backoff.plan(start + 64ms)), 2000us);  // capped at 1/32 of the wait
  EXPECT_EQ(us(backoff.plan(start + 320ms)), 2000us);
  EXPECT_EQ(us(backoff.plan(start + 320ms)), 4000us);
  EXPECT_EQ(us(backoff.plan(start + 320ms)), 8000us);
  EXPECT_EQ(us(backoff.plan(start + 320ms)), 10000us);
  EXPECT_EQ(us(backoff.plan(start + 10s)), 10000us);
  EXPECT_EQ(us(backoff.plan(start + 10s)), 20000us);   // never beyond max_sleep
  EXPECT_EQ(us(backoff.plan(start + 10s)), 20000us);
}

TEST(PollBackoff, MovingBytesSpinForOneMillisecondPlusTheirTimeAtTwoGBPerSecond) {
  const auto start = Clock::now();
  PollBackoff backoff(PollBackoff::default_max_sleep, start);
  const size_t bytes = 4'000'000;  // 2 ms at 2 GB/s: spin for 3 ms
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(backoff.plan(start + 2900us, bytes), Clock::duration::zero()) << i;
  EXPECT_EQ(us(backoff.plan(start + 3100us, bytes)), 20us);
  EXPECT_EQ(us(backoff.plan(start + 3200us, bytes)), 40us);
}

TEST(PollBackoff, ResetSpinsAgainAndSleepsFromTheStart) {
  const auto long_ago = Clock::now();
  PollBackoff backoff(PollBackoff::default_max_sleep, long_ago);
  for (int i = 0; i < 100; ++i) backoff.plan(long_ago + 1s);
  EXPECT_GE(us(backoff.plan(long_ago + 1s)), 1000us);
  const auto now = long_ago + 1s;
  backoff.reset(now);
  EXPECT_EQ(backoff.plan(now + 10us), Clock::duration::zero());
  EXPECT_EQ(backoff.plan(now + 10us, 1), Clock::duration::zero());  // moving bytes: the window starts again
  EXPECT_EQ(us(backoff.plan(now + 2ms, 1)), 20us);
}

TEST(PollBackoff, PauseReturnsAfterAboutItsPlan) {
  // The real pause of a fresh backoff is a yield: far below a millisecond even on a busy machine
  // is not asserted (no time limits in tests); only that it returns and the state moves on.
  PollBackoff backoff;
  for (int i = 0; i < PollBackoff::spin_polls + 3; ++i) backoff.pause();
  EXPECT_GT(us(backoff.plan(Clock::now())), 0us);
}

}  // namespace
