// The padding of the planned batches (runtime/train/padding_summary.h) on a split of known lengths,
// worked out by hand below.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "runtime/train/padding_summary.h"
#include "tests/support/command.h"

namespace sluice::runtime {
namespace {

// Two of each: bucket 0 (<= 100 frames) 40, 60, 80, 100; bucket 1: 120, 160, 200, 240. Tokens are
// a quarter of the frames.
std::vector<PlanSample> known_split() {
  std::vector<PlanSample> samples;
  int64_t index = 0;
  for (int copy = 0; copy < 2; ++copy) {
    for (int32_t frames : {40, 60, 80, 100, 120, 160, 200, 240}) samples.push_back({index++, frames, frames / 4});
  }
  return samples;
}

BatchPlanConfig two_buckets() {
  BatchPlanConfig config;
  config.bucket_edges = {100};
  config.batch_size = 2;
  config.pad_multiple = 8;
  return config;
}

// 2 model ranks x 2 samples: each bucket's 8 samples make 2 global steps, nothing dropped.
// Bucket 0 pads to 104 frames (100 rounded up to 8) and 32 tokens (25 -> 32): real frames
// 2 x 280 = 560 of 8 x 104 = 832; tokens 2 x 70 = 140 of 8 x 32 = 256. Bucket 1 pads to 240 frames
// and 64 tokens: 1440 of 1920 frames, 360 of 512 tokens.
TEST(PaddingSummary, PerBucketAndTotalFiguresOfAKnownSplit) {
  const PaddingSummary s = summarize_padding(known_split(), two_buckets(), 2);
  ASSERT_EQ(s.buckets.size(), 2u);
  const auto& b0 = s.buckets[0].figures;
  EXPECT_EQ(s.buckets[0].shape.max_frames, 104);
  EXPECT_EQ(b0.batches, 4);
  EXPECT_EQ(b0.samples, 8);
  EXPECT_EQ(b0.real_frames, 560);
  EXPECT_EQ(b0.padded_frames, 832);
  EXPECT_EQ(b0.real_tokens, 140);
  EXPECT_EQ(b0.padded_tokens, 256);
  EXPECT_DOUBLE_EQ(b0.frame_efficiency(), 560.0 / 832.0);
  const auto& b1 = s.buckets[1].figures;
  EXPECT_EQ(b1.real_frames, 1440);
  EXPECT_EQ(b1.padded_frames, 1920);
  EXPECT_EQ(b1.real_tokens, 360);
  EXPECT_EQ(b1.padded_tokens, 512);
  EXPECT_EQ(s.total.batches, 8);
  EXPECT_EQ(s.total.samples, 16);
  EXPECT_DOUBLE_EQ(s.total.frame_efficiency(), 2000.0 / 2752.0);
  EXPECT_DOUBLE_EQ(s.total.token_efficiency(), 500.0 / 768.0);
}

// One quantile bucket pads everything to 240 frames: 2000 of 16 x 240 = 3840. More buckets pad
// less, and the document says by how much.
TEST(PaddingSummary, AlternativesSayWhatMoreBucketsSave) {
  BatchPlanConfig config;
  config.n_buckets = 1;
  config.batch_size = 2;
  const auto doc = padding_json(known_split(), config, 2);
  EXPECT_EQ(doc["format"], padding_format);
  EXPECT_DOUBLE_EQ(doc["total"]["frame_efficiency"].get<double>(), 2000.0 / 3840.0);
  ASSERT_FALSE(doc["alternatives"].empty()) << doc.dump(2);
  const auto& two = doc["alternatives"][0];
  EXPECT_EQ(two["n_buckets"], 2);
  EXPECT_GT(two["frame_efficiency"].get<double>(), 2000.0 / 3840.0);
  EXPECT_NEAR(two["padded_frames_saved_fraction"].get<double>(),
              1.0 - (2000.0 / 3840.0) / two["frame_efficiency"].get<double>(), 1e-12);
  // Fixed edges: train.n_buckets has no effect, so no alternatives.
  EXPECT_TRUE(padding_json(known_split(), two_buckets(), 2)["alternatives"].empty());
}

// 16 samples, one bucket, 3 model ranks x 2: two steps of 6, a tail step of 1 per rank, 1 deferred.
TEST(PaddingSummary, TheTailStepIsARowAndTheRemainderIsCounted) {
  BatchPlanConfig config;
  config.n_buckets = 1;
  config.batch_size = 2;
  const auto doc = padding_json(known_split(), config, 3, 1);
  ASSERT_EQ(doc["buckets"].size(), 2u) << doc.dump(2);
  EXPECT_FALSE(doc["buckets"][0]["tail"].get<bool>());
  EXPECT_TRUE(doc["buckets"][1]["tail"].get<bool>());
  EXPECT_EQ(doc["buckets"][1]["batch_size"], 1);
  EXPECT_EQ(doc["buckets"][1]["samples"], 3);
  EXPECT_EQ(doc["total"]["samples"], 15);
  EXPECT_EQ(doc["remainder"]["spilled"], 0);
  EXPECT_EQ(doc["remainder"]["deferred"], 1);
  EXPECT_EQ(doc["remainder"]["deferred_past_end"], 1);
  EXPECT_FALSE(padding_json(known_split(), config, 3)["remainder"].contains("deferred_past_end"));
}

TEST(PaddingSummary, WritesPaddingJsonIntoTheRunDir) {
  const auto dir = test::scratch_dir("padding-summary", "run");
  write_padding_summary(dir, known_split(), two_buckets(), 2);
  std::ifstream in(dir / "padding.json");
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["buckets"][1]["padded_frames"], 1920);
  EXPECT_EQ(doc["model_ranks"], 2);
}

// train.mixture: the two copies of the known split as two caches (indices 0-7 and 8-15). With
// weights 1 and 1 the epoch is the plain one; each copy's 8 samples hold 1,000 real frames padded
// to 4 x 104 + 4 x 240 = 1,376 (376 of padding): half of everything each. With weight 0.5 on the
// second, it gives 4 of its 8 samples to the epoch.
TEST(PaddingSummary, AMixturesCorporaHaveTheirSharesOfSamplesPaddingAndInputTime) {
  BatchPlanConfig config = two_buckets();
  config.mixture = {{0, 1.0}, {8, 1.0}};
  const auto doc = padding_json(known_split(), config, 2, -1, {"cache-a", "cache-b"});
  ASSERT_EQ(doc["corpora"].size(), 2u) << doc.dump(2);
  for (const auto& corpus : doc["corpora"]) {
    EXPECT_EQ(corpus["samples"], 8);
    EXPECT_EQ(corpus["real_frames"], 1000);
    EXPECT_EQ(corpus["padded_frames"], 1376);
    EXPECT_EQ(corpus["padding_frames"], 376);
    EXPECT_EQ(corpus["sample_share"], 0.5);
    EXPECT_EQ(corpus["padding_share"], 0.5);
    EXPECT_EQ(corpus["frame_share"], 0.5);
  }
  EXPECT_EQ(doc["corpora"][1]["dir"], "cache-b");
  config.mixture[1].weight = 0.5;
  config.batch_size = 1;  // 12 samples: 2 model ranks x 1 fill whole steps
  const auto half = padding_json(known_split(), config, 2);
  EXPECT_EQ(half["corpora"][0]["samples"], 8);
  EXPECT_EQ(half["corpora"][1]["samples"], 4);
  EXPECT_NEAR(half["corpora"][1]["sample_share"].get<double>(), 4.0 / 12, 1e-12);
  // Without a mixture there is no "corpora".
  EXPECT_FALSE(padding_json(known_split(), two_buckets(), 2).contains("corpora"));
}

}  // namespace
}  // namespace sluice::runtime
