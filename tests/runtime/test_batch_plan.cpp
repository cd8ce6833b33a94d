#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache/cache_reader.h"
#include "common/error.h"
#include "runtime/train/batch_plan.h"

namespace sluice::runtime {
namespace {

// A split of `n` samples with lengths spread over [min_frames, min_frames + span), made by a
// fixed LCG so the test data never changes; tokens are about a fifth of the frames.
std::vector<PlanSample> make_split(int64_t n, int32_t min_frames = 40, int32_t span = 960) {
  std::vector<PlanSample> samples;
  uint64_t state = 42;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto frames = static_cast<int32_t>(min_frames + static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(span)));
    samples.push_back({i * 3 + 7, frames, frames / 5 + static_cast<int32_t>((state >> 20) % 7)});
  }
  return samples;
}

std::map<int64_t, PlanSample> by_index(const std::vector<PlanSample>& samples) {
  std::map<int64_t, PlanSample> map;
  for (const auto& s : samples) map[s.index] = s;
  return map;
}

void expect_same_plan(const BatchPlan& a, const BatchPlan& b) {
  ASSERT_EQ(a.steps(), b.steps());
  ASSERT_EQ(a.model_ranks(), b.model_ranks());
  for (int64_t step = 0; step < a.steps(); ++step) {
    for (int rank = 0; rank < a.model_ranks(); ++rank) {
      ASSERT_EQ(a.batch(step, rank).bucket, b.batch(step, rank).bucket) << "step " << step;
      ASSERT_EQ(a.batch(step, rank).samples, b.batch(step, rank).samples) << "step " << step;
    }
  }
  EXPECT_EQ(a.deferred_indices(), b.deferred_indices());
}

void expect_same_shapes(const BatchPlan& a, const BatchPlan& b) {
  ASSERT_EQ(a.buckets().size(), b.buckets().size());
  for (size_t i = 0; i < a.buckets().size(); ++i) {
    EXPECT_EQ(a.buckets()[i].max_frames, b.buckets()[i].max_frames);
    EXPECT_EQ(a.buckets()[i].max_tokens, b.buckets()[i].max_tokens);
    EXPECT_EQ(a.buckets()[i].batch_size, b.buckets()[i].batch_size);
    EXPECT_EQ(a.buckets()[i].steps, b.buckets()[i].steps);
  }
}

TEST(BatchPlan, SameInputsGiveTheSamePlanWhateverTheInputOrder) {
  const auto split = make_split(2000);
  BatchPlanConfig config;
  const BatchPlan a = BatchPlan::build(split, config, 2, 5);
  auto reversed = split;
  std::reverse(reversed.begin(), reversed.end());
  const BatchPlan b = BatchPlan::build(reversed, config, 2, 5);
  expect_same_plan(a, b);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(a.fingerprint().size(), 32u);
}

TEST(BatchPlan, AnotherEpochShufflesButKeepsShapesAndCounts) {
  const auto split = make_split(2000);
  BatchPlanConfig config;
  const BatchPlan e0 = BatchPlan::build(split, config, 2, 0);
  const BatchPlan e1 = BatchPlan::build(split, config, 2, 1);
  expect_same_shapes(e0, e1);
  EXPECT_EQ(e0.steps(), e1.steps());
  EXPECT_EQ(e0.deferred_samples(), e1.deferred_samples());  // nothing carried into either
  EXPECT_EQ(e0.spilled_samples(), e1.spilled_samples());
  EXPECT_EQ(e0.fingerprint(), e1.fingerprint());  // a position stays valid across epochs
  int64_t same_batches = 0, same_buckets = 0;
  for (int64_t step = 0; step < e0.steps(); ++step) {
    same_batches += e0.batch(step, 0).samples == e1.batch(step, 0).samples;
    same_buckets += e0.batch(step, 0).bucket == e1.batch(step, 0).bucket;
  }
  EXPECT_EQ(same_batches, 0);
  EXPECT_LT(same_buckets, e0.steps() / 2);  // 8 buckets: ~1/8 agree by chance

  config.seed = 99;
  const BatchPlan other_seed = BatchPlan::build(split, config, 2, 0);
  EXPECT_NE(other_seed.batch(0, 0).samples, e0.batch(0, 0).samples);
  EXPECT_NE(other_seed.fingerprint(), e0.fingerprint());
}

// The algorithm is part of the checkpoint format: a resumed run must rebuild the very same plan,
// also after an upgrade or on another standard library. These values lock it; they were checked
// against an independent Python implementation of mt19937_64 + splitmix64 + Fisher-Yates.
TEST(BatchPlan, ShuffleIsPinned) {
  std::vector<PlanSample> split;
  for (int64_t i = 0; i < 12; ++i) split.push_back({i, 100, 10});
  BatchPlanConfig config;
  config.batch_size = 2;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_EQ(plan.steps(), 3);
  std::vector<int64_t> order;
  for (int64_t step = 0; step < 3; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      for (int64_t s : plan.batch(step, rank).samples) order.push_back(s);
    }
  }
  EXPECT_EQ(order, (std::vector<int64_t>{10, 0, 3, 11, 4, 9, 2, 1, 6, 5, 8, 7}));
}

class BatchPlanRanks : public ::testing::TestWithParam<int> {};

TEST_P(BatchPlanRanks, EveryRankGetsOneBatchOfTheSameBucketPerStep) {
  const int ranks = GetParam();
  const auto split = make_split(3001);
  BatchPlanConfig config;
  config.batch_size = 12;
  const BatchPlan plan = BatchPlan::build(split, config, ranks, 3);
  ASSERT_GT(plan.steps(), 0);
  EXPECT_EQ(plan.model_ranks(), ranks);
  int64_t from_buckets = 0;
  for (const auto& bucket : plan.buckets()) from_buckets += bucket.steps;
  EXPECT_EQ(plan.steps(), from_buckets);
  for (int64_t step = 0; step < plan.steps(); ++step) {
    const int32_t bucket = plan.batch(step, 0).bucket;
    for (int rank = 0; rank < ranks; ++rank) {
      const PlannedBatch& batch = plan.batch(step, rank);
      ASSERT_EQ(batch.bucket, bucket) << "step " << step << " rank " << rank;
      ASSERT_EQ(static_cast<int32_t>(batch.samples.size()), plan.buckets()[static_cast<size_t>(bucket)].batch_size);
    }
  }
  EXPECT_THROW(plan.batch(plan.steps(), 0), Error);
  EXPECT_THROW(plan.batch(0, ranks), Error);
}

TEST_P(BatchPlanRanks, EverySampleOnceExceptExactlyTheDeferred) {
  const int ranks = GetParam();
  const auto split = make_split(3001);
  BatchPlanConfig config;
  config.batch_size = 12;
  const BatchPlan plan = BatchPlan::build(split, config, ranks, 0);
  std::multiset<int64_t> seen;
  for (int64_t step = 0; step < plan.steps(); ++step) {
    for (int rank = 0; rank < ranks; ++rank) {
      for (int64_t s : plan.batch(step, rank).samples) seen.insert(s);
    }
  }
  const std::set<int64_t> unique(seen.begin(), seen.end());
  EXPECT_EQ(unique.size(), seen.size()) << "a sample appears twice in one epoch";
  std::set<int64_t> deferred(plan.deferred_indices().begin(), plan.deferred_indices().end());
  EXPECT_EQ(deferred.size(), plan.deferred_indices().size());
  std::set<int64_t> all;
  for (const auto& s : split) all.insert(s.index);
  std::set<int64_t> covered = unique;
  for (int64_t d : deferred) EXPECT_EQ(covered.count(d), 0u) << "deferred sample " << d << " was planned";
  covered.insert(deferred.begin(), deferred.end());
  EXPECT_EQ(covered, all);

  // A bucket spills only what cannot fill one more global step; fewer than the model ranks are deferred.
  for (const auto& bucket : plan.buckets()) {
    if (bucket.tail) continue;
    const int64_t group = int64_t{bucket.batch_size} * ranks;
    EXPECT_EQ(bucket.samples - bucket.steps * group, bucket.spilled);
    EXPECT_LT(bucket.spilled, group);
  }
  EXPECT_LT(plan.deferred_samples(), ranks);
  EXPECT_EQ(static_cast<int64_t>(seen.size()) + plan.deferred_samples(), 3001);
  const EpochCounts counts = plan.whole_epoch(0);
  EXPECT_EQ(counts.steps, plan.steps());
  EXPECT_EQ(counts.deferred, plan.deferred_samples());
}

// The guarantee: over a run of E epochs, each epoch carrying what the one before deferred, every
// sample is trained exactly E times, except the last epoch's deferred ones (E - 1 times).
TEST_P(BatchPlanRanks, EverySampleOncePerEpochOverARunExceptTheLastEpochsDeferred) {
  const int ranks = GetParam();
  const auto split = make_split(601);
  BatchPlanConfig config;
  config.batch_size = 8;
  constexpr int kEpochs = 20;
  std::map<int64_t, int> times;
  std::vector<int64_t> carried;
  std::set<int64_t> steps_seen;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    const BatchPlan plan = BatchPlan::build(split, config, ranks, epoch, carried);
    EXPECT_EQ(plan.steps(), plan.whole_epoch(static_cast<int64_t>(carried.size())).steps) << "epoch " << epoch;
    EXPECT_EQ(plan.deferred_samples(), plan.whole_epoch(static_cast<int64_t>(carried.size())).deferred);
    EXPECT_LT(plan.deferred_samples(), ranks);
    steps_seen.insert(plan.steps());
    for (int64_t step = 0; step < plan.steps(); ++step) {
      for (int rank = 0; rank < ranks; ++rank) {
        const PlannedBatch& batch = plan.batch(step, rank);
        EXPECT_EQ(static_cast<int32_t>(batch.samples.size()), plan.buckets()[static_cast<size_t>(batch.bucket)].batch_size);
        for (int64_t s : batch.samples) ++times[s];
      }
    }
    // Nothing carried in is deferred again.
    for (int64_t c : carried) EXPECT_EQ(std::count(plan.deferred_indices().begin(), plan.deferred_indices().end(), c), 0);
    carried = plan.deferred_indices();
  }
  EXPECT_EQ(times.size(), split.size());
  for (const auto& s : split) {
    const bool deferred_past_end = std::count(carried.begin(), carried.end(), s.index) > 0;
    EXPECT_EQ(times[s.index], deferred_past_end ? kEpochs - 1 : kEpochs) << "sample " << s.index;
  }
  EXPECT_LE(steps_seen.size(), 2u) << "epochs differ by more than one step";
}

INSTANTIATE_TEST_SUITE_P(ModelRanks, BatchPlanRanks, ::testing::Values(1, 2, 3));

TEST(BatchPlan, PaddedShapesHoldEverySampleOfTheirBucket) {
  const auto split = make_split(2500);
  const auto lengths = by_index(split);
  BatchPlanConfig config;
  config.pad_multiple = 16;
  const BatchPlan plan = BatchPlan::build(split, config, 3, 1);
  for (int64_t step = 0; step < plan.steps(); ++step) {
    for (int rank = 0; rank < 3; ++rank) {
      const PlannedBatch& batch = plan.batch(step, rank);
      const BucketShape& shape = plan.buckets()[static_cast<size_t>(batch.bucket)];
      for (int64_t index : batch.samples) {
        const PlanSample& s = lengths.at(index);
        ASSERT_LE(s.n_frames, shape.max_frames) << "sample " << index;
        ASSERT_LE(s.n_tokens, shape.max_tokens) << "sample " << index;
      }
    }
  }
  // Buckets are disjoint frame ranges, and each shape is its bucket's longest sample (over the
  // whole split) rounded up to pad_multiple, the tokens the longest of it and the shorter buckets
  // (a spilled sample fits): tight, and epoch-free.
  int32_t tokens_so_far = 0;
  for (size_t b = 0; b < plan.buckets().size(); ++b) {
    const BucketShape& shape = plan.buckets()[b];
    if (shape.tail) continue;
    if (b > 0) {
      EXPECT_GT(shape.shortest_frames, plan.buckets()[b - 1].max_frames);
    }
    int64_t count = 0;
    int32_t longest = 0, tokens = 0;
    for (const auto& s : split) {
      if (s.n_frames < shape.shortest_frames || s.n_frames > shape.max_frames) continue;
      ++count;
      longest = std::max(longest, s.n_frames);
      tokens = std::max(tokens, s.n_tokens);
    }
    EXPECT_EQ(count + (b > 0 ? plan.buckets()[b - 1].spilled : 0), shape.samples) << "bucket " << b;
    EXPECT_EQ(shape.max_frames, (longest + 15) / 16 * 16) << "bucket " << b;
    tokens_so_far = std::max(tokens_so_far, tokens);
    EXPECT_EQ(shape.max_tokens, (tokens_so_far + 15) / 16 * 16) << "bucket " << b;
  }
}

TEST(BatchPlan, ExplicitEdgesAreInclusiveUpperBoundsAndTheLastBucketIsOpen) {
  std::vector<PlanSample> split;
  int64_t index = 0;
  // 8 samples of each length: 200 belongs to the first bucket, 201 to the second, 999 to the
  // open bucket after the last edge.
  for (int32_t frames : {10, 200, 201, 399, 400, 401, 999}) {
    for (int i = 0; i < 8; ++i) split.push_back({index++, frames, frames / 10 + i});
  }
  BatchPlanConfig config;
  config.bucket_edges = {200, 400};
  config.batch_size = 4;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_EQ(plan.buckets().size(), 3u);
  EXPECT_EQ(plan.buckets()[0].samples, 16);
  EXPECT_EQ(plan.buckets()[0].shortest_frames, 10);
  EXPECT_EQ(plan.buckets()[0].max_frames, 200);
  EXPECT_EQ(plan.buckets()[0].max_tokens, 32);  // 200/10 + 7 = 27 -> 32
  EXPECT_EQ(plan.buckets()[1].samples, 24);
  EXPECT_EQ(plan.buckets()[1].shortest_frames, 201);
  EXPECT_EQ(plan.buckets()[1].max_frames, 400);
  EXPECT_EQ(plan.buckets()[1].max_tokens, 48);  // 47
  EXPECT_EQ(plan.buckets()[2].samples, 16);
  EXPECT_EQ(plan.buckets()[2].shortest_frames, 401);
  EXPECT_EQ(plan.buckets()[2].max_frames, 1000);  // 999 -> 1000
  EXPECT_EQ(plan.buckets()[2].max_tokens, 112);   // 106
  EXPECT_EQ(plan.buckets()[0].steps, 2);
  EXPECT_EQ(plan.buckets()[1].steps, 3);
  EXPECT_EQ(plan.buckets()[2].steps, 2);
  EXPECT_EQ(plan.steps(), 7);
  EXPECT_EQ(plan.deferred_samples(), 0);
  EXPECT_EQ(plan.spilled_samples(), 0);
}

TEST(BatchPlan, EmptyBucketsVanishAndTooSmallOnesMergeIntoTheLongerNeighbour) {
  std::vector<PlanSample> split;
  int64_t index = 0;
  for (int i = 0; i < 3; ++i) split.push_back({index++, 50, 5});      // too few for one step
  for (int i = 0; i < 16; ++i) split.push_back({index++, 300, 30});
  for (int i = 0; i < 16; ++i) split.push_back({index++, 700, 70});
  for (int i = 0; i < 2; ++i) split.push_back({index++, 5000, 90});   // too few: merges down
  BatchPlanConfig config;
  config.bucket_edges = {100, 200, 400, 800};  // (100, 200] stays empty
  config.batch_size = 4;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_GE(plan.buckets().size(), 2u);
  EXPECT_EQ(plan.buckets()[0].shortest_frames, 50);
  EXPECT_EQ(plan.buckets()[0].max_frames, 304);
  EXPECT_EQ(plan.buckets()[0].samples, 19);
  EXPECT_EQ(plan.buckets()[1].shortest_frames, 700);
  EXPECT_EQ(plan.buckets()[1].max_frames, 5000);
  EXPECT_EQ(plan.buckets()[1].max_tokens, 96);
  // 19 = 2 steps of 8 and 3 spilled into the last bucket: 3 + 18 = 21 = 2 steps, a tail step of
  // 2 per rank, 1 deferred.
  EXPECT_EQ(plan.buckets()[0].spilled, 3);
  EXPECT_EQ(plan.buckets()[1].samples, 21);
  ASSERT_EQ(plan.buckets().size(), 3u);
  EXPECT_TRUE(plan.buckets()[2].tail);
  EXPECT_EQ(plan.buckets()[2].batch_size, 2);
  EXPECT_EQ(plan.buckets()[2].max_frames, 5000);
  EXPECT_EQ(plan.steps(), 2 + 2 + 1);
  EXPECT_EQ(plan.deferred_samples(), 1);
}

TEST(BatchPlan, QuantileEdgesSplitTheSplitEvenly) {
  const auto split = make_split(8000);
  BatchPlanConfig config;
  config.n_buckets = 4;
  config.batch_size = 10;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_GE(plan.buckets().size(), 4u);
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_NEAR(static_cast<double>(plan.buckets()[b].samples), 2000.0, 100.0) << "bucket " << b;
    EXPECT_FALSE(plan.buckets()[b].tail);
    if (b > 0) {
      EXPECT_GT(plan.buckets()[b].max_frames, plan.buckets()[b - 1].max_frames);
    }
  }
  // Lengths are uniform over [40, 1000): the quartiles are near 280, 520, 760.
  EXPECT_NEAR(plan.buckets()[0].max_frames, 280, 16);
  EXPECT_NEAR(plan.buckets()[1].max_frames, 520, 16);
  EXPECT_NEAR(plan.buckets()[2].max_frames, 760, 16);
  EXPECT_EQ(plan.buckets()[3].max_frames, 1000);  // the longest sample (999), rounded up
}

TEST(BatchPlan, QuantilesOfEqualLengthsCollapseIntoOneBucket) {
  std::vector<PlanSample> split;
  for (int64_t i = 0; i < 100; ++i) split.push_back({i, 123, 17});
  BatchPlanConfig config;
  config.n_buckets = 8;
  const BatchPlan plan = BatchPlan::build(split, config, 1, 0);
  ASSERT_EQ(plan.buckets().size(), 2u);  // the bucket and its tail step
  EXPECT_EQ(plan.buckets()[0].max_frames, 128);
  EXPECT_EQ(plan.buckets()[0].max_tokens, 24);
  EXPECT_EQ(plan.buckets()[1].batch_size, 4);  // 100 = 6 x 16 + 4
  EXPECT_EQ(plan.steps(), 7);
  EXPECT_EQ(plan.deferred_samples(), 0);
}

TEST(BatchPlan, FrameBudgetSetsTheBatchSizeOfEachBucket) {
  const auto split = make_split(5000);
  BatchPlanConfig config;
  config.batch_size = 0;
  config.frame_budget = 12000;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_GT(plan.buckets().size(), 1u);
  for (const auto& bucket : plan.buckets()) {
    if (bucket.tail) continue;  // fewer
    EXPECT_EQ(bucket.batch_size, 12000 / bucket.max_frames);
    EXPECT_LE(int64_t{bucket.batch_size} * bucket.max_frames, 12000);
    EXPECT_GT(int64_t{bucket.batch_size + 1} * bucket.max_frames, 12000);
  }
  EXPECT_GT(plan.buckets().front().batch_size, plan.buckets()[plan.buckets().size() - 2].batch_size);
  for (int64_t step = 0; step < plan.steps(); ++step) {
    const PlannedBatch& batch = plan.batch(step, 1);
    const auto& shape = plan.buckets()[static_cast<size_t>(batch.bucket)];
    EXPECT_LE(static_cast<int64_t>(batch.samples.size()) * shape.max_frames, 12000);
  }

  // frame_budget wins over batch_size.
  config.batch_size = 3;
  const BatchPlan both = BatchPlan::build(split, config, 2, 0);
  expect_same_shapes(plan, both);
}

TEST(BatchPlan, ABucketLongerThanTheBudgetGetsOneSamplePerBatch) {
  std::vector<PlanSample> split;
  for (int64_t i = 0; i < 40; ++i) split.push_back({i, 96, 10});
  for (int64_t i = 40; i < 44; ++i) split.push_back({i, 2000, 10});
  BatchPlanConfig config;
  config.bucket_edges = {100};
  config.batch_size = 0;
  config.frame_budget = 1000;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  ASSERT_GE(plan.buckets().size(), 2u);
  EXPECT_EQ(plan.buckets()[0].batch_size, 10);
  EXPECT_EQ(plan.buckets()[1].batch_size, 1);
  EXPECT_EQ(plan.buckets()[1].steps, 2);
  EXPECT_NE(plan.summary().find("longer than train.frame_budget"), std::string::npos)
      << plan.summary();
}

TEST(BatchPlan, StepsOfAllBucketsAreInterleaved) {
  const auto split = make_split(4000);
  BatchPlanConfig config;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  std::vector<int32_t> order;
  for (int64_t step = 0; step < plan.steps(); ++step) order.push_back(plan.batch(step, 0).bucket);
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
  // Every bucket shows up in the first quarter of the epoch.
  std::set<int32_t> early(order.begin(), order.begin() + static_cast<ptrdiff_t>(order.size() / 4));
  EXPECT_EQ(early.size(), plan.buckets().size());
}

TEST(BatchPlan, ResumeContinuesWithTheNextUnseenBatch) {
  const auto split = make_split(700);
  BatchPlanConfig config;
  config.batch_size = 8;
  const int ranks = 3;
  // One uninterrupted run of two and a half epochs, as the sequence of rank 1's batches; each
  // epoch carries what the one before deferred.
  std::vector<std::vector<int64_t>> straight;
  PlanPosition at{0, 0};
  BatchPlan plan = BatchPlan::build(split, config, ranks, 0);
  const int64_t total = plan.steps() * 5 / 2;
  for (int64_t i = 0; i < total; ++i) {
    if (plan.epoch() != at.epoch) plan = BatchPlan::build(split, config, ranks, at.epoch, plan.deferred_indices());
    straight.push_back(plan.batch(at.step, 1).samples);
    at = plan.next(at);
  }
  // Interrupted after every 7th batch: the checkpoint keeps the position of the next batch, the
  // fingerprint and the samples carried into its epoch; the "new process" rebuilds the plan.
  std::vector<std::vector<int64_t>> resumed;
  PlanPosition checkpoint{0, 0};
  std::vector<int64_t> carried;
  std::string fingerprint = plan.fingerprint();
  while (static_cast<int64_t>(resumed.size()) < total) {
    BatchPlan fresh = BatchPlan::build(split, config, ranks, checkpoint.epoch, carried);
    ASSERT_EQ(fresh.fingerprint(), fingerprint);
    PlanPosition p = checkpoint;
    for (int i = 0; i < 7 && static_cast<int64_t>(resumed.size()) < total; ++i) {
      if (fresh.epoch() != p.epoch) fresh = BatchPlan::build(split, config, ranks, p.epoch, fresh.deferred_indices());
      resumed.push_back(fresh.batch(p.step, 1).samples);
      p = fresh.next(p);
    }
    carried = p.epoch == fresh.epoch() ? fresh.carried() : fresh.deferred_indices();
    checkpoint = p;
  }
  EXPECT_EQ(resumed, straight);
}

TEST(BatchPlan, NextWrapsIntoTheNextEpoch) {
  std::vector<PlanSample> split;
  for (int64_t i = 0; i < 12; ++i) split.push_back({i, 100, 10});
  BatchPlanConfig config;
  config.batch_size = 2;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 4);
  ASSERT_EQ(plan.steps(), 3);
  EXPECT_EQ(plan.next({4, 0}), (PlanPosition{4, 1}));
  EXPECT_EQ(plan.next({4, 2}), (PlanPosition{5, 0}));
  EXPECT_THROW(plan.next({4, 3}), Error);
  EXPECT_THROW(plan.next({-1, 0}), Error);
}

void expect_config_error(const std::vector<PlanSample>& split, const BatchPlanConfig& config,
                         int ranks, const std::vector<std::string>& words) {
  try {
    BatchPlan::build(split, config, ranks, 0);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    for (const auto& word : words) {
      EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' not in: " << message;
    }
  }
}

TEST(BatchPlanConfigErrors, NameTheKeyToChange) {
  const auto split = make_split(200);
  BatchPlanConfig config;
  config.batch_size = 0;
  config.frame_budget = 0;
  expect_config_error(split, config, 1, {"train.batch_size", "train.frame_budget", "both 0"});

  config = {};
  config.bucket_edges = {100, 300, 300};
  expect_config_error(split, config, 1, {"train.bucket_edges", "[100, 300, 300]", "increasing"});
  config.bucket_edges = {0, 100};
  expect_config_error(split, config, 1, {"train.bucket_edges"});

  config = {};
  config.batch_size = 0;
  config.frame_budget = 100;  // the shortest bucket pads to more than 100 frames
  expect_config_error(split, config, 1, {"train.frame_budget", "at least"});

  config = {};
  config.batch_size = 64;
  expect_config_error(split, config, 4, {"train.batch_size", "200 training samples", "4 model rank"});
  config = {};
  config.batch_size = 0;
  config.frame_budget = 100000;
  expect_config_error(split, config, 8, {"train.frame_budget", "fewer model ranks"});

  config = {};
  config.pad_multiple = 0;
  expect_config_error(split, config, 1, {"train.pad_multiple"});
  config = {};
  config.n_buckets = 0;
  expect_config_error(split, config, 1, {"train.n_buckets"});
  config = {};
  config.batch_size = -2;
  expect_config_error(split, config, 1, {"train.batch_size"});
  config = {};
  expect_config_error({}, config, 1, {"training split is empty"});
}

TEST(BatchPlan, MalformedSamplesAreDataErrors) {
  BatchPlanConfig config;
  config.batch_size = 1;
  EXPECT_THROW(BatchPlan::build({{1, 100, 10}, {1, 120, 10}}, config, 1, 0), DataError);
  EXPECT_THROW(BatchPlan::build({{1, 0, 10}}, config, 1, 0), DataError);
}

TEST(BatchPlan, SummaryListsEveryBucket) {
  const auto split = make_split(1000);
  BatchPlanConfig config;
  config.n_buckets = 3;
  const BatchPlan plan = BatchPlan::build(split, config, 2, 0);
  const std::string summary = plan.summary();
  EXPECT_NE(summary.find("1000 samples"), std::string::npos) << summary;
  EXPECT_NE(summary.find(std::to_string(plan.steps()) + " global steps"), std::string::npos) << summary;
  EXPECT_NE(summary.find("..1000"), std::string::npos) << summary;
}

std::string utterance_id(int i) {
  char id[32];
  std::snprintf(id, sizeof id, "LJ%03d-%04d", i / 1000, i % 1000);
  return id;
}

TEST(ValidationSplit, StableAndNearTheFraction) {
  std::set<std::string> chosen;
  for (int i = 0; i < 10000; ++i) {
    if (is_validation(utterance_id(i), 0.10, 7)) chosen.insert(utterance_id(i));
  }
  EXPECT_NEAR(static_cast<double>(chosen.size()), 1000.0, 150.0);
  for (int i = 0; i < 10000; ++i) {
    EXPECT_EQ(is_validation(utterance_id(i), 0.10, 7), chosen.count(utterance_id(i)) == 1);
  }
  // A larger fraction keeps every id of the smaller one (thresholds on one hash).
  for (const auto& id : chosen) EXPECT_TRUE(is_validation(id, 0.2, 7));
  // Another seed picks another set of about the same size.
  int other = 0, overlap = 0;
  for (int i = 0; i < 10000; ++i) {
    const bool v = is_validation(utterance_id(i), 0.10, 8);
    other += v;
    overlap += v && chosen.count(utterance_id(i));
  }
  EXPECT_NEAR(other, 1000.0, 150.0);
  EXPECT_LT(overlap, 200);
  // Pinned: XXH64 is a specified hash, so the split never moves between versions or machines.
  EXPECT_EQ(chosen.size(), 1054u);
  EXPECT_EQ(std::vector<std::string>(chosen.begin(), std::next(chosen.begin(), 4)),
            (std::vector<std::string>{"LJ000-0015", "LJ000-0021", "LJ000-0022", "LJ000-0026"}));
}

TEST(ValidationSplit, EdgeFractions) {
  EXPECT_FALSE(is_validation("a", 0.0, 1));
  EXPECT_TRUE(is_validation("a", 1.0, 1));
  EXPECT_THROW(is_validation("a", 1.5, 1), ConfigError);
  EXPECT_THROW(is_validation("a", -0.1, 1), ConfigError);
}

TEST(ValidationSplit, SplitSamplesKeepsCacheIndices) {
  std::vector<cache::IndexEntry> entries(500);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].id = utterance_id(static_cast<int>(i));
    entries[i].n_frames = static_cast<int32_t>(100 + i);
    entries[i].n_tokens = static_cast<int32_t>(i % 50);
  }
  const SplitSamples split = split_samples(entries, 0.25, 3);
  EXPECT_EQ(split.train.size() + split.validation.size(), entries.size());
  EXPECT_NEAR(static_cast<double>(split.validation.size()), 125.0, 35.0);
  for (const auto& s : split.validation) {
    EXPECT_TRUE(is_validation(entries[static_cast<size_t>(s.index)].id, 0.25, 3));
    EXPECT_EQ(s.n_frames, 100 + s.index);
  }
  for (const auto& s : split.train) EXPECT_FALSE(is_validation(entries[static_cast<size_t>(s.index)].id, 0.25, 3));
}

}  // namespace
}  // namespace sluice::runtime
