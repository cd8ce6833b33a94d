// The batch plan of a mixture (train.mixture: several caches in one run; runtime/train/batch_plan.h,
// "Mixture"): each corpus's samples walked in seeded cycles, weight x samples of it per epoch, the
// owed copies dealt as a plain epoch's; deterministic, and exact across resumes on the same or
// another model-rank count. Pure, one process.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "runtime/train/batch_plan.h"
#include "runtime/train/plan_schedule.h"

namespace sluice::runtime {
namespace {

// Corpus c has sizes[c] samples at cache indices first + 0, 1, ...; the first corpus begins at 0,
// the next at 10,000, and so on (a mixture's one index space). Lengths from a fixed LCG.
struct Mixed {
  std::vector<PlanSample> split;
  BatchPlanConfig config;
};

Mixed make_mixture(const std::vector<int64_t>& sizes, const std::vector<double>& weights) {
  Mixed mixed;
  mixed.config.batch_size = 4;
  mixed.config.n_buckets = 3;
  uint64_t state = 11;
  for (size_t c = 0; c < sizes.size(); ++c) {
    const int64_t first = static_cast<int64_t>(c) * 10'000;
    mixed.config.mixture.push_back({first, weights[c]});
    for (int64_t i = 0; i < sizes[c]; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto frames = static_cast<int32_t>(50 + (state >> 33) % 700);
      mixed.split.push_back({first + i, frames, frames / 5 + 1});
    }
  }
  return mixed;
}

// How often each cache index is trained by `plan`'s steps, plus its deferred samples.
void count_epoch(const BatchPlan& plan, std::map<int64_t, int>& counts) {
  for (int64_t step = 0; step < plan.steps(); ++step) {
    for (int rank = 0; rank < plan.model_ranks(); ++rank) {
      for (int64_t index : plan.batch(step, rank).samples) ++counts[index];
    }
  }
}

// Epochs [0, epochs) built one after the other as a run builds them (each takes what the one
// before deferred); counts every trained sample and the last epoch's deferred ones.
std::map<int64_t, int> run_epochs(const Mixed& mixed, int model_ranks, int64_t epochs) {
  std::map<int64_t, int> counts;
  std::vector<int64_t> carried;
  for (int64_t e = 0; e < epochs; ++e) {
    const BatchPlan plan = BatchPlan::build(mixed.split, mixed.config, model_ranks, e, carried);
    count_epoch(plan, counts);
    carried = plan.deferred_indices();
  }
  for (int64_t index : carried) ++counts[index];
  return counts;
}

// The counts of corpus c's samples (cache indices [c x 10,000, + size)), each as often as `times`.
void expect_each(const std::map<int64_t, int>& counts, size_t c, int64_t size, int times) {
  for (int64_t i = 0; i < size; ++i) {
    const auto it = counts.find(static_cast<int64_t>(c) * 10'000 + i);
    ASSERT_EQ(it == counts.end() ? 0 : it->second, times) << "corpus " << c << " sample " << i;
  }
}

TEST(MixturePlan, EverySampleOfEachCorpusIsTrainedOnceOverItsCycle) {
  // Weight 1: every epoch a whole cycle; weight 0.5: a cycle every two epochs; 0.25: every four.
  const Mixed mixed = make_mixture({300, 120, 200}, {1.0, 0.5, 0.25});
  const auto counts = run_epochs(mixed, 3, 4);
  expect_each(counts, 0, 300, 4);
  expect_each(counts, 1, 120, 2);
  expect_each(counts, 2, 200, 1);
  int64_t total = 0;
  for (const auto& [index, n] : counts) total += n;
  EXPECT_EQ(total, 4 * 300 + 2 * 120 + 200);
}

TEST(MixturePlan, WeightsAboveOneRepeatACorpusWithinAnEpochEachSampleOncePerCycle) {
  const Mixed mixed = make_mixture({300, 50}, {1.0, 3.0});
  const BatchPlan plan = BatchPlan::build(mixed.split, mixed.config, 2, 0);
  EXPECT_EQ(plan.owed_per_corpus(), (std::vector<int64_t>{300, 150}));
  EXPECT_EQ(plan.owed_samples(), 450);
  std::map<int64_t, int> counts;
  count_epoch(plan, counts);
  for (int64_t index : plan.deferred_indices()) ++counts[index];
  expect_each(counts, 0, 300, 1);
  expect_each(counts, 1, 50, 3);
}

TEST(MixturePlan, AFractionalWeightGivesItsShareEveryEpochAndWholeEpochCountsMatchTheBuiltPlans) {
  // 0.37 x 400 = 148 per epoch: the cycle positions [floor(148 e), floor(148 (e + 1))); the
  // corpus of weight 2 is two whole cycles an epoch (counted from its per-bucket sizes).
  const Mixed mixed = make_mixture({250, 400, 90}, {1.0, 0.37, 2.0});
  std::vector<int64_t> carried;
  const BatchPlan first = BatchPlan::build(mixed.split, mixed.config, 3, 0);
  for (int64_t e = 0; e < 12; ++e) {
    const BatchPlan plan = BatchPlan::build(mixed.split, mixed.config, 3, e, carried);
    EXPECT_EQ(plan.owed_per_corpus()[0], 250) << "epoch " << e;
    EXPECT_EQ(plan.owed_per_corpus()[1], 148) << "epoch " << e;
    EXPECT_EQ(plan.owed_per_corpus()[2], 180) << "epoch " << e;
    // The schedule counts an epoch from the first plan, without building it.
    const EpochCounts counts = first.whole_epoch(static_cast<int64_t>(carried.size()), e);
    EXPECT_EQ(counts.steps, plan.steps()) << "epoch " << e;
    EXPECT_EQ(counts.deferred, plan.deferred_samples()) << "epoch " << e;
    // The shapes are the whole split's, the same in every epoch.
    ASSERT_EQ(plan.buckets().size() - (plan.buckets().back().tail ? 1 : 0),
              first.buckets().size() - (first.buckets().back().tail ? 1 : 0));
    for (size_t b = 0; b < plan.buckets().size() && !plan.buckets()[b].tail; ++b) {
      EXPECT_EQ(plan.buckets()[b].max_frames, first.buckets()[b].max_frames);
    }
    carried = plan.deferred_indices();
  }
}

TEST(MixturePlan, ThePlanIsDeterministicAndTheSeedChangesIt) {
  const Mixed mixed = make_mixture({200, 100}, {1.0, 0.5});
  const BatchPlan a = BatchPlan::build(mixed.split, mixed.config, 2, 3);
  std::vector<PlanSample> reversed(mixed.split.rbegin(), mixed.split.rend());
  const BatchPlan b = BatchPlan::build(reversed, mixed.config, 2, 3);
  ASSERT_EQ(a.steps(), b.steps());
  for (int64_t s = 0; s < a.steps(); ++s) EXPECT_EQ(a.batch(s, 1).samples, b.batch(s, 1).samples);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  BatchPlanConfig other = mixed.config;
  other.seed += 1;
  EXPECT_NE(BatchPlan::build(mixed.split, other, 2, 3).batch(0, 0).samples, a.batch(0, 0).samples);
  // The mixture's weights are part of the fingerprint (a checkpoint's position names its samples).
  other = mixed.config;
  other.mixture[1].weight = 0.75;
  EXPECT_NE(BatchPlan::fingerprint_of(mixed.split, other, 2), a.fingerprint());
}

TEST(MixturePlan, AOneCacheMixtureOfWeightOneIsThePlainPlanButForTheFingerprint) {
  Mixed mixed = make_mixture({500}, {1.0});
  BatchPlanConfig plain = mixed.config;
  plain.mixture.clear();
  const BatchPlan with = BatchPlan::build(mixed.split, mixed.config, 3, 2);
  const BatchPlan without = BatchPlan::build(mixed.split, plain, 3, 2);
  ASSERT_EQ(with.steps(), without.steps());
  for (int64_t s = 0; s < with.steps(); ++s) {
    for (int r = 0; r < 3; ++r) ASSERT_EQ(with.batch(s, r).samples, without.batch(s, r).samples) << s;
  }
  EXPECT_NE(with.fingerprint(), without.fingerprint());
}

TEST(MixturePlan, TheTemperatureSharesTheSameEpochAsPowersOfWeightTimesSamples) {
  BatchPlanConfig config;
  config.mixture = {{0, 1.0}, {10'000, 1.0}};
  config.mixture_temperature = 0.5;
  // 900 and 100 samples: 1000 per epoch shared 30 : 10 (square roots), so 750 and 250.
  const auto quotas = mixture_quotas({900, 100}, config);
  EXPECT_EQ(quotas[0], 750 * kMixtureQuotaUnit);
  EXPECT_EQ(quotas[1], 250 * kMixtureQuotaUnit);
  config.mixture_temperature = 1.0;
  EXPECT_EQ(mixture_quotas({900, 100}, config), (std::vector<int64_t>{900 * kMixtureQuotaUnit, 100 * kMixtureQuotaUnit}));
}

TEST(MixturePlan, AResumeOnTheSameOrAnotherModelRankCountTrainsEveryOwedCopyOnce) {
  const Mixed mixed = make_mixture({400, 160}, {1.0, 0.5});
  const PlanSchedule four(mixed.split, mixed.config, 4);
  const int64_t at = four.epoch_start(1) + 5;  // epoch 1, step 5
  // The same count: the same batches from the checkpoint on.
  PlanSchedule same(mixed.split, mixed.config, 4);
  EXPECT_FALSE(same.resume(four.record(at)));
  for (int64_t g = at; g < four.epoch_start(3); ++g) {
    ASSERT_EQ(same.position(g), four.position(g)) << g;
    ASSERT_EQ(same.batch(g, 3).batch->samples, four.batch(g, 3).batch->samples) << g;
  }
  // Another count: epoch 1 finishes with what it owes and has not trained, each copy once.
  PlanSchedule three(mixed.split, mixed.config, 3);
  EXPECT_TRUE(three.resume(four.record(at)));
  std::map<int64_t, int> trained;
  for (int64_t step = 0; step < 5; ++step) {
    for (int r = 0; r < 4; ++r) {
      for (int64_t index : four.epoch(1)->batch(step, r).samples) ++trained[index];
    }
  }
  const auto rest = three.epoch(1);
  count_epoch(*rest, trained);
  for (int64_t index : rest->deferred_indices()) ++trained[index];
  std::map<int64_t, int> owed;
  count_epoch(*four.epoch(1), owed);
  for (int64_t index : four.epoch(1)->deferred_indices()) ++owed[index];
  EXPECT_EQ(trained, owed);
  // Epoch 1 owes all of corpus 0 once, and its carried-in copies; half of corpus 1 (the cycle's second half).
  EXPECT_EQ(rest->owed_per_corpus(), (std::vector<int64_t>{400, 80}));
  EXPECT_EQ(three.epoch_start(2), at + rest->steps());
}

TEST(MixturePlan, AResumeWithOtherWeightsIsRefused) {
  const Mixed mixed = make_mixture({300, 100}, {1.0, 0.5});
  const PlanSchedule run(mixed.split, mixed.config, 2);
  BatchPlanConfig other = mixed.config;
  other.mixture[1].weight = 1.0;
  PlanSchedule changed(mixed.split, other, 2);
  EXPECT_THROW(changed.resume(run.record(run.epoch_start(1) + 2)), ConfigError);
}

TEST(MixturePlan, BadWeightsAndTemperaturesAreConfigErrors) {
  Mixed mixed = make_mixture({100, 100}, {1.0, 0.0});
  EXPECT_THROW(BatchPlan::build(mixed.split, mixed.config, 1, 0), ConfigError);
  mixed = make_mixture({100, 100}, {1.0, 1.0});
  mixed.config.mixture_temperature = 0;
  EXPECT_THROW(BatchPlan::build(mixed.split, mixed.config, 1, 0), ConfigError);
}

}  // namespace
}  // namespace sluice::runtime
