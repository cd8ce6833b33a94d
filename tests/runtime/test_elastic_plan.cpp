// The batch plan at scale and across an elastic resume (runtime/train/batch_plan.h,
// plan_schedule.h): every sample of an epoch trained once, except fewer than the model ranks
// deferred to the next epoch (which trains them first), on any model-rank count and any chain of
// resumes. Pure, one process.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <cstdint>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "runtime/train/batch_plan.h"
#include "runtime/train/plan_schedule.h"

namespace sluice::runtime {
namespace {

// `n` samples with LibriTTS-like lengths (100 to 2,100 frames), made by a fixed LCG; cache
// indices with gaps, as a split leaves them.
std::vector<PlanSample> make_split(int64_t n) {
  std::vector<PlanSample> samples;
  samples.reserve(static_cast<size_t>(n));
  uint64_t state = 7;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto frames = static_cast<int32_t>(100 + (state >> 33) % 2000);
    samples.push_back({i * 2 + 1, frames, frames / 6 + 3});
  }
  return samples;
}

// How often each sample of `split` (by position in the split) appears.
class SampleCounts {
 public:
  explicit SampleCounts(const std::vector<PlanSample>& split) {
    for (const PlanSample& s : split) indices_.push_back(s.index);
    std::sort(indices_.begin(), indices_.end());
    counts_.assign(indices_.size(), 0);
  }
  void add(int64_t index) {
    const auto it = std::lower_bound(indices_.begin(), indices_.end(), index);
    ASSERT_TRUE(it != indices_.end() && *it == index) << "sample " << index << " is not in the split";
    ++counts_[static_cast<size_t>(it - indices_.begin())];
  }
  // Adds every sample of `plan`'s steps [first, last).
  void add_steps(const BatchPlan& plan, int64_t first, int64_t last) {
    for (int64_t step = first; step < last; ++step) {
      for (int rank = 0; rank < plan.model_ranks(); ++rank) {
        for (int64_t index : plan.batch(step, rank).samples) add(index);
      }
    }
  }
  int64_t with_count(int count) const {
    return std::count(counts_.begin(), counts_.end(), count);
  }
  int max() const { return counts_.empty() ? 0 : *std::max_element(counts_.begin(), counts_.end()); }

 private:
  std::vector<int64_t> indices_;
  std::vector<int> counts_;
};

// Balanced: every model rank's batch of a step comes from one bucket with its batch size.
void expect_balanced(const BatchPlan& plan) {
  for (int64_t step = 0; step < plan.steps(); ++step) {
    const int32_t bucket = plan.batch(step, 0).bucket;
    const auto size = static_cast<size_t>(plan.buckets()[static_cast<size_t>(bucket)].batch_size);
    for (int rank = 0; rank < plan.model_ranks(); ++rank) {
      ASSERT_EQ(plan.batch(step, rank).bucket, bucket) << "step " << step << " rank " << rank;
      ASSERT_EQ(plan.batch(step, rank).samples.size(), size) << "step " << step << " rank " << rank;
    }
  }
}

// Samples a plan trains: the steps' batch sizes added up.
int64_t trained_by(const BatchPlan& plan) {
  int64_t trained = 0;
  for (const BucketShape& shape : plan.buckets()) trained += shape.steps * shape.batch_size * plan.model_ranks();
  return trained;
}

// At the scale of a cluster: a million samples, 4,096 model ranks, computed as every rank
// computes it. No time limit here (bench/plan/bench_plan measures the time).
void expect_every_sample_once_at_scale(int batch_size) {
  const auto split = make_split(1'000'000);
  BatchPlanConfig config;
  config.batch_size = batch_size;  // 16,384 or 65,536 samples per global step
  config.n_buckets = 8;
  const BatchPlan plan = BatchPlan::build(split, config, 4096, 3);
  expect_balanced(plan);
  SampleCounts counts(split);
  counts.add_steps(plan, 0, plan.steps());
  for (int64_t index : plan.deferred_indices()) counts.add(index);
  EXPECT_EQ(counts.max(), 1);
  EXPECT_EQ(counts.with_count(1), 1'000'000);
  // Nothing dropped; fewer than the model ranks (here under 0.5%) deferred to the next epoch.
  EXPECT_LT(plan.deferred_samples(), 4096);
  EXPECT_LE(plan.deferred_samples(), 1'000'000 / 200);
  EXPECT_EQ(trained_by(plan) + plan.deferred_samples(), 1'000'000);
}

TEST(BatchPlanAtScale, AMillionSamplesOn4096ModelRanksTrainEverySampleOncePerEpoch) {
  expect_every_sample_once_at_scale(4);
  expect_every_sample_once_at_scale(16);
}

TEST(BatchPlanAtScale, AnElasticResumeFrom4096To3072ModelRanksTrainsTheRestOnce) {
  const auto split = make_split(1'000'000);
  BatchPlanConfig config;
  config.batch_size = 4;
  const BatchPlan first = BatchPlan::build(split, config, 4096, 0);
  const int64_t done = first.steps() / 2;
  const BatchPlan rest = BatchPlan::build_rest(split, config, 3072, 0, {{4096, done}});
  expect_balanced(rest);
  SampleCounts counts(split);
  counts.add_steps(first, 0, done);
  counts.add_steps(rest, 0, rest.steps());
  for (int64_t index : rest.deferred_indices()) counts.add(index);
  EXPECT_EQ(counts.max(), 1);
  EXPECT_EQ(counts.with_count(1), 1'000'000);
  EXPECT_EQ(static_cast<int64_t>(rest.trained_earlier().size()), done * 4096 * 4);
}

struct Resume {
  int model_ranks;
  double share;  // of its plan's steps trained before the next resume
};

// Runs an epoch (with `carried` carried into it) as a chain of resumes and counts every sample
// trained: once, a carried one twice.
void expect_each_sample_once(const std::vector<PlanSample>& split, const BatchPlanConfig& config,
                             const std::vector<Resume>& chain, const std::vector<int64_t>& carried = {}) {
  SampleCounts counts(split);
  std::vector<EpochSegment> earlier;
  for (size_t i = 0; i < chain.size(); ++i) {
    const BatchPlan plan = BatchPlan::build_rest(split, config, chain[i].model_ranks, 5, earlier, carried);
    expect_balanced(plan);
    EXPECT_EQ(plan.fingerprint(), BatchPlan::fingerprint_of(split, config, chain[i].model_ranks));
    const bool last = i + 1 == chain.size();
    const auto steps = last ? plan.steps() : static_cast<int64_t>(chain[i].share * static_cast<double>(plan.steps()));
    counts.add_steps(plan, 0, steps);
    if (last) {
      for (int64_t index : plan.deferred_indices()) counts.add(index);
      EXPECT_LT(plan.deferred_samples(), chain[i].model_ranks);
    }
    earlier.push_back({chain[i].model_ranks, steps});
  }
  EXPECT_EQ(counts.max(), carried.empty() ? 1 : 2);
  EXPECT_EQ(counts.with_count(2), static_cast<int64_t>(carried.size()));
  EXPECT_EQ(counts.with_count(1), static_cast<int64_t>(split.size() - carried.size()));
}

TEST(ElasticPlan, FourToTwoModelRanksTrainsEverySampleOfTheEpochOnce) {
  BatchPlanConfig config;
  config.batch_size = 8;
  expect_each_sample_once(make_split(3000), config, {{4, 0.4}, {2, 1.0}});
}

TEST(ElasticPlan, TwoToThreeAndChainsOfResumesTrainEverySampleOnce) {
  BatchPlanConfig config;
  config.batch_size = 8;
  expect_each_sample_once(make_split(3000), config, {{2, 0.5}, {3, 1.0}});
  expect_each_sample_once(make_split(3000), config, {{4, 0.3}, {2, 0.5}, {3, 0.2}, {5, 1.0}});
  config.frame_budget = 9000;  // batch sizes by bucket
  expect_each_sample_once(make_split(3000), config, {{3, 0.6}, {7, 1.0}});
}

TEST(ElasticPlan, AnEpochWithCarriedSamplesResumedElasticallyTrainsEachOwedCopyOnce) {
  BatchPlanConfig config;
  config.batch_size = 8;
  const auto split = make_split(3000);
  const BatchPlan before = BatchPlan::build(split, config, 7, 4);  // defers a few to epoch 5
  ASSERT_GT(before.deferred_samples(), 0);
  expect_each_sample_once(split, config, {{7, 0.5}, {3, 1.0}}, before.deferred_indices());
  expect_each_sample_once(split, config, {{7, 0.0}, {2, 0.4}, {5, 1.0}}, before.deferred_indices());
}

TEST(ElasticPlan, TheRestIsDeterministicKeepsTheFullPlansShapesAndDependsOnTheSegments) {
  const auto split = make_split(2000);
  BatchPlanConfig config;
  config.batch_size = 8;
  const BatchPlan a = BatchPlan::build_rest(split, config, 2, 1, {{4, 10}});
  std::vector<PlanSample> reversed(split.rbegin(), split.rend());
  const BatchPlan b = BatchPlan::build_rest(reversed, config, 2, 1, {{4, 10}});
  ASSERT_EQ(a.steps(), b.steps());
  for (int64_t step = 0; step < a.steps(); ++step) {
    for (int rank = 0; rank < 2; ++rank) ASSERT_EQ(a.batch(step, rank).samples, b.batch(step, rank).samples);
  }
  const BatchPlan full = BatchPlan::build(split, config, 2, 1);
  for (size_t i = 0; i < std::min(a.buckets().size(), full.buckets().size()); ++i) {
    if (a.buckets()[i].tail || full.buckets()[i].tail) break;
    EXPECT_EQ(a.buckets()[i].max_frames, full.buckets()[i].max_frames);
    EXPECT_EQ(a.buckets()[i].max_tokens, full.buckets()[i].max_tokens);
    EXPECT_EQ(a.buckets()[i].batch_size, full.buckets()[i].batch_size);
  }
  // Nothing trained earlier: the plan of build().
  const BatchPlan none = BatchPlan::build_rest(split, config, 2, 1, {});
  EXPECT_EQ(none.batch(0, 1).samples, full.batch(0, 1).samples);
  // Another history, another rest.
  const BatchPlan other = BatchPlan::build_rest(split, config, 2, 1, {{4, 11}});
  EXPECT_NE(other.batch(0, 0).samples, a.batch(0, 0).samples);
  EXPECT_EQ(a.earlier(), (std::vector<EpochSegment>{{4, 10}}));
}

TEST(ElasticPlan, ASegmentLongerThanItsPlanIsADataError) {
  const auto split = make_split(500);
  BatchPlanConfig config;
  config.batch_size = 8;
  const int64_t steps = BatchPlan::build(split, config, 4, 0).steps();
  EXPECT_THROW(BatchPlan::build_rest(split, config, 2, 0, {{4, steps + 1}}), DataError);
}

// The schedule across a resume: numbering, the epoch after the rest, what a checkpoint records.
TEST(PlanScheduleResume, TheSameModelRankCountContinuesTheUninterruptedNumbering) {
  const auto split = make_split(1500);
  BatchPlanConfig config;
  config.batch_size = 8;
  const PlanSchedule straight(split, config, 3);
  const int64_t at = straight.steps_per_epoch() + 5;
  PlanSchedule resumed(split, config, 3);
  EXPECT_FALSE(resumed.resume(straight.record(at)));
  for (int64_t g = at; g < at + 3 * straight.steps_per_epoch(); ++g) {
    ASSERT_EQ(resumed.position(g), straight.position(g)) << g;
    ASSERT_EQ(resumed.batch(g, 2).batch->samples, straight.batch(g, 2).batch->samples) << g;
  }
  EXPECT_EQ(resumed.epoch_start(4), straight.epoch_start(4));
  int64_t steps = 0;
  for (int64_t e = 0; e < 4; ++e) {
    steps += straight.epoch(e)->steps();
    EXPECT_LE(std::abs(straight.epoch(e)->steps() - straight.steps_per_epoch()), 1) << "epoch " << e;
  }
  EXPECT_EQ(straight.epoch_start(4), steps);
  EXPECT_EQ(straight.deferred_after(4), straight.epoch(3)->deferred_samples());
}

TEST(PlanScheduleResume, AnotherModelRankCountFinishesTheEpochThenPlansWholeEpochs) {
  const auto split = make_split(1500);
  BatchPlanConfig config;
  config.batch_size = 8;
  const PlanSchedule four(split, config, 4);
  const int64_t at = four.steps_per_epoch() + 7;  // epoch 1, step 7
  PlanSchedule two(split, config, 2);
  EXPECT_TRUE(two.resume(four.record(at)));
  // The rest of epoch 1 starts at the checkpoint's global step.
  EXPECT_EQ(two.position(at), (PlanPosition{1, 0}));
  const auto rest = two.epoch(1);
  EXPECT_EQ(rest->earlier(), (std::vector<EpochSegment>{{4, 7}}));
  EXPECT_EQ(two.epoch_start(2), at + rest->steps());
  EXPECT_EQ(two.position(at + rest->steps()), (PlanPosition{2, 0}));
  EXPECT_EQ(two.epoch(2)->carried(), rest->deferred_indices());
  EXPECT_EQ(two.epoch_start(3), two.epoch_start(2) + two.epoch(2)->steps());
  // Counted across the resume, epoch 1 trains every sample once, and twice those epoch 0 carried
  // into it (owed from epoch 0), but for what the rest defers to epoch 2.
  SampleCounts counts(split);
  counts.add_steps(*four.epoch(1), 0, 7);
  for (int64_t g = at; g < two.epoch_start(2); ++g) {
    for (int rank = 0; rank < 2; ++rank) {
      for (int64_t index : two.batch(g, rank).batch->samples) counts.add(index);
    }
  }
  for (int64_t index : rest->deferred_indices()) counts.add(index);
  const std::vector<int64_t>& carried = four.epoch(1)->carried();
  EXPECT_EQ(carried, four.epoch(0)->deferred_indices());
  EXPECT_EQ(rest->carried(), carried);
  EXPECT_EQ(counts.max(), carried.empty() ? 1 : 2);
  EXPECT_EQ(counts.with_count(2), static_cast<int64_t>(carried.size()));
  EXPECT_EQ(counts.with_count(1), static_cast<int64_t>(split.size() - carried.size()));
  // A checkpoint in the rest records the history; resuming it on three ranks goes on from there.
  const PlanRecord mid = two.record(at + 3);
  EXPECT_EQ(mid.at, (PlanPosition{1, 3}));
  EXPECT_EQ(mid.earlier, (std::vector<EpochSegment>{{4, 7}}));
  EXPECT_EQ(mid.model_ranks, 2);
  PlanSchedule three(split, config, 3);
  EXPECT_TRUE(three.resume(mid));
  EXPECT_EQ(three.epoch(1)->earlier(), (std::vector<EpochSegment>{{4, 7}, {2, 3}}));
  // ... and on two ranks again: the same rest, at its step 3.
  PlanSchedule again(split, config, 2);
  EXPECT_FALSE(again.resume(mid));
  EXPECT_EQ(again.position(at + 3), (PlanPosition{1, 3}));
  EXPECT_EQ(again.batch(at + 3, 1).batch->samples, two.batch(at + 3, 1).batch->samples);
  // A checkpoint in a later epoch records no history.
  EXPECT_TRUE(two.record(two.epoch_start(2) + 1).earlier.empty());
}

TEST(PlanScheduleResume, OtherPlanSettingsOrAnOldCheckpointAreRefused) {
  const auto split = make_split(800);
  BatchPlanConfig config;
  config.batch_size = 8;
  const PlanSchedule four(split, config, 4);
  PlanRecord record = four.record(5);
  BatchPlanConfig other = config;
  other.batch_size = 4;
  PlanSchedule changed(split, other, 4);
  EXPECT_THROW(changed.resume(record), ConfigError);
  record.model_ranks = 0;  // written before elastic resume
  PlanSchedule two(split, config, 2);
  EXPECT_THROW(two.resume(record), ConfigError);
  // A checkpoint of plan version 1 (it dropped the remainder) names no "plan_version".
  PlanRecord old = four.record(5);
  old.plan_version = 0;
  PlanSchedule same(split, config, 4);
  try {
    same.resume(old);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("batch plan version 1"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace sluice::runtime
