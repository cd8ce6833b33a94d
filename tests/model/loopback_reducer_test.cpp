#include "model/loopback_reducer.h"

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "gradient_reducer_suite.h"

namespace sluice::model {
namespace {

using testing::GradientReducerSuite;

// The suite every reducer passes, for the loopback reducer standing in for three ranks.
class LoopbackHarness : public testing::ReducerHarness {
 public:
  std::unique_ptr<GradientReducer> make(double /*timeout_s: nothing to wait for*/) override {
    return std::make_unique<LoopbackReducer>(3);
  }
  bool ranks_are_processes() const override { return false; }
  std::string silent_peer_skip_reason() const override {
    return "one process stands in for every rank: no peer can be silent";
  }
};

INSTANTIATE_TEST_SUITE_P(Loopback, GradientReducerSuite,
                         ::testing::Values(testing::ReducerImplementation{
                             "loopback", [] { return std::make_unique<LoopbackHarness>(); }}),
                         testing::implementation_name);

// What the loopback reducer records for the trainer's tests: which buckets it was given.
TEST(LoopbackReducer, RecordsTheStartedBucketsAndWaitAllCalls) {
  LoopbackReducer reducer(2, 1024);
  std::vector<float> first(1000, 1.0f), second(10, -4.0f);
  reducer.start(0, first.data(), first.size());
  reducer.start(1, second.data(), second.size());
  reducer.wait_all();
  EXPECT_EQ(first, std::vector<float>(1000, 2.0f));
  EXPECT_EQ(second, std::vector<float>(10, -8.0f));
  const auto calls = reducer.started();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].bucket_id, 0);
  EXPECT_EQ(calls[0].count, 1000u);
  EXPECT_EQ(calls[1].bucket_id, 1);
  EXPECT_EQ(reducer.wait_all_calls(), 1);
  EXPECT_EQ(reducer.bucket_bytes(), 1024u);
}

TEST(LoopbackReducer, RefusesNoRanksAndBucketsSmallerThanAFloat) {
  EXPECT_THROW(LoopbackReducer(0), ConfigError);
  EXPECT_THROW(LoopbackReducer(2, 3), ConfigError);
}

}  // namespace
}  // namespace sluice::model
