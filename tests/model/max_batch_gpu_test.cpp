// `sluice bench max-batch`'s search on a real GPU (label gpu): skips without a CUDA device.
#include <gtest/gtest.h>

#include "model/device_facts.h"

namespace sluice::model {
namespace {

TEST(MaxBatchGpu, FindsABatchThatFitsAndReportsPeakMemory) {
  if (torch_facts().cuda_devices == 0) GTEST_SKIP() << "no CUDA device";
  MaxBatchRequest request;
  request.model.device = "cuda:0";
  request.model.size = "tiny";
  request.frames = 400;
  request.tokens = 80;
  request.max_batch = 64;  // bounded: the tiny model fits 64 on any training GPU
  request.margin = 0.25;
  const MaxBatchResult result = find_max_batch(request);
  EXPECT_EQ(result.largest_fitting, 64);
  EXPECT_EQ(result.recommended, 48);
  EXPECT_GT(result.peak_allocated_bytes, 0);
  EXPECT_LT(result.peak_allocated_bytes, result.device_total_bytes);
  ASSERT_FALSE(result.probes.empty());
  EXPECT_EQ(result.probes.front().batch, 1);
  // Doubling: 1, 2, 4, ..., 64, each fitting, with peak memory growing with the batch.
  EXPECT_EQ(result.probes.size(), 7u);
  EXPECT_LT(result.probes.front().peak_allocated_bytes, result.probes.back().peak_allocated_bytes);
}

}  // namespace
}  // namespace sluice::model
