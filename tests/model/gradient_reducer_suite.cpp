// What every GradientReducer must do (model/gradient_reducer.h): sums over the ranks, in place,
// bucket by bucket, never outside a bucket; step after step; and a wait that gives up on a silent
// peer names it within twice the timeout.
#include "gradient_reducer_suite.h"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <utility>
#include <vector>

#include "common/error.h"

namespace sluice::model::testing {
namespace {

constexpr double patient_s = 30;  // long enough for any loaded machine; only reached on a bug

// Rank `rank`'s gradient element `i` at step `step`: multiples of 1/4 in [-8, 8], so sums over a
// few ranks are exact in float and every element, rank and step differs from its neighbours.
float contribution(size_t i, int rank, int step) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 + static_cast<size_t>(step) * 5) % 33) - 16) /
         4.0f;
}

// This rank's gradients: its own when ranks are processes; else every rank holds rank 0's.
std::vector<float> local_gradients(const ReducerHarness& harness, const GradientReducer& reducer, size_t count,
                                   int step) {
  const int me = harness.ranks_are_processes() ? reducer.rank() : 0;
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = contribution(i, me, step);
  return values;
}

// The element-wise sum over all ranks of what each holds.
std::vector<float> summed_gradients(const ReducerHarness& harness, const GradientReducer& reducer, size_t count,
                                    int step) {
  std::vector<float> sums(count, 0.0f);
  for (int r = 0; r < reducer.world_size(); ++r) {
    const int holder = harness.ranks_are_processes() ? r : 0;
    for (size_t i = 0; i < count; ++i) sums[i] += contribution(i, holder, step);
  }
  return sums;
}

// The first element where `actual` differs from `expected`, for a readable failure.
::testing::AssertionResult same_values(const std::vector<float>& actual, const std::vector<float>& expected,
                                       size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (actual[i] != expected[i]) {
      return ::testing::AssertionFailure() << "element " << i << " is " << actual[i] << ", expected " << expected[i];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(GradientReducerSuite, RankAndWorldSizeDescribeTheRanks) {
  const auto reducer = harness_->make(patient_s);
  EXPECT_GE(reducer->world_size(), 1);
  EXPECT_GE(reducer->rank(), 0);
  EXPECT_LT(reducer->rank(), reducer->world_size());
  EXPECT_GE(reducer->bucket_bytes(), sizeof(float));
  EXPECT_EQ(reducer->bucket_bytes() % sizeof(float), 0u);
}

TEST_P(GradientReducerSuite, AllReduceSumLeavesTheSumOverRanksOnEveryRank) {
  const auto reducer = harness_->make(patient_s);
  ASSERT_GE(reducer->world_size(), 2) << "a sum over one rank cannot tell a reduction from none";
  std::vector<float> data = local_gradients(*harness_, *reducer, 1000, 0);
  reducer->all_reduce_sum(data.data(), data.size());
  EXPECT_TRUE(same_values(data, summed_gradients(*harness_, *reducer, 1000, 0), 0, data.size()));
}

// Buckets of one flat buffer, as the trainer cuts it (one of a single element among them), started
// in increasing id: after wait_all each holds the sum, and the elements after the last started
// bucket, which no bucket covers, are untouched.
TEST_P(GradientReducerSuite, WaitAllLeavesEachStartedBucketSummedAndNothingOutside) {
  const auto reducer = harness_->make(patient_s);
  const std::vector<size_t> bucket_sizes{300, 1, 700, 22};
  const size_t covered = std::accumulate(bucket_sizes.begin(), bucket_sizes.end(), size_t{0});
  const size_t count = covered + 10;
  std::vector<float> data = local_gradients(*harness_, *reducer, count, 0);
  const std::vector<float> local = data;
  size_t offset = 0;
  for (size_t id = 0; id < bucket_sizes.size(); ++id) {
    reducer->start(static_cast<int>(id), data.data() + offset, bucket_sizes[id]);
    offset += bucket_sizes[id];
  }
  reducer->wait_all();
  EXPECT_TRUE(same_values(data, summed_gradients(*harness_, *reducer, count, 0), 0, covered));
  EXPECT_TRUE(same_values(data, local, covered, count)) << "an element outside every bucket changed";
}

// One step's buckets leave nothing behind for the next: every step's sums are that step's.
TEST_P(GradientReducerSuite, StepAfterStepEachSumIsThatStepsOwn) {
  const auto reducer = harness_->make(patient_s);
  reducer->wait_all();  // nothing started: returns at once
  for (int step = 0; step < 3; ++step) {
    std::vector<float> first = local_gradients(*harness_, *reducer, 64, step);
    std::vector<float> second = local_gradients(*harness_, *reducer, 5, step + 10);
    reducer->start(0, first.data(), first.size());
    reducer->start(1, second.data(), second.size());
    reducer->wait_all();
    EXPECT_TRUE(same_values(first, summed_gradients(*harness_, *reducer, 64, step), 0, 64)) << "step " << step;
    EXPECT_TRUE(same_values(second, summed_gradients(*harness_, *reducer, 5, step + 10), 0, 5)) << "step " << step;
  }
}

// The last rank starts nothing until the others have given up: their wait_all throws
// TransportError naming it, after the timeout and within twice the timeout. It then catches up,
// and the others' second wait_all completes the same reduction (so the ranks leave in step).
TEST_P(GradientReducerSuite, ASilentPeerIsNamedWithinTwiceTheTimeout) {
  const std::string skip = harness_->silent_peer_skip_reason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  constexpr double timeout_s = 1.0;
  const auto reducer = harness_->make(timeout_s);
  const int silent = reducer->world_size() - 1;
  std::vector<float> data = local_gradients(*harness_, *reducer, 128, 0);
  if (reducer->rank() != silent) {
    const auto begin = std::chrono::steady_clock::now();
    reducer->start(0, data.data(), data.size());
    try {
      reducer->wait_all();
      ADD_FAILURE() << "wait_all returned although " << harness_->describe(silent) << " started nothing";
    } catch (const TransportError& error) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      EXPECT_GE(waited, timeout_s);
      EXPECT_LE(waited, 2 * timeout_s);
      EXPECT_NE(std::string(error.what()).find(harness_->describe(silent)), std::string::npos) << error.what();
    }
  }
  harness_->barrier();
  if (reducer->rank() == silent) reducer->start(0, data.data(), data.size());
  reducer->wait_all();
  EXPECT_TRUE(same_values(data, summed_gradients(*harness_, *reducer, 128, 0), 0, data.size()));
}

}  // namespace
}  // namespace sluice::model::testing
