#include "model/loopback_reducer.h"

#include <vector>

#include <gtest/gtest.h>

namespace sluice::model {
namespace {

TEST(LoopbackReducer, SumIsLocalTimesWorldSize) {
  LoopbackReducer reducer(3);
  std::vector<float> data{1.0f, -2.5f, 0.0f};
  reducer.all_reduce_sum(data.data(), data.size());
  EXPECT_EQ(data, (std::vector<float>{3.0f, -7.5f, 0.0f}));
}

TEST(LoopbackReducer, StartedBucketsAreReducedByWaitAll) {
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
  reducer.wait_all();  // nothing in flight: returns at once
}

}  // namespace
}  // namespace sluice::model
