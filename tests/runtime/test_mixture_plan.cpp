// The batch plan of a mixture (train.mixture: several caches in one run; runtime/train/batch_plan.h,
// "Mixture"): each corpus's samples walked in seeded cycles, weight x samples of it per epoch, the
// owed copies dealt as a plain epoch's; deterministic, and exact across resumes on the same or
// another model-rank count. Pure, one process.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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

// Sample i of corpus c speaks language language_of(c, i) and is spoken by speaker speaker_of(c, i)
// (the ids unified over the caches, as CacheReader::open_mixture() gives them).
void label(Mixed& mixed, const std::function<uint32_t(size_t, int64_t)>& language_of,
           const std::function<uint32_t(size_t, int64_t)>& speaker_of) {
  for (PlanSample& sample : mixed.split) {
    const auto c = static_cast<size_t>(sample.index / 10'000);
    sample.language = language_of(c, sample.index % 10'000);
    sample.speaker = speaker_of(c, sample.index % 10'000);
  }
}

// Every trained copy of epochs [0, epochs) and the last one's deferred ones, per language.
std::map<uint32_t, int64_t> per_language(const Mixed& mixed, const std::map<int64_t, int>& counts) {
  std::map<int64_t, uint32_t> language;
  for (const PlanSample& sample : mixed.split) language[sample.index] = sample.language;
  std::map<uint32_t, int64_t> totals;
  for (const auto& [index, n] : counts) totals[language.at(index)] += n;
  return totals;
}

TEST(MixturePlan, OneCacheTemperedOverItsLanguagesUpsamplesTheSmallOneEachSampleOncePerCycle) {
  // One cache (a mixture of one corpus of weight 1), 900 samples of language 0 and 100 of
  // language 1: at a = 0.5 the epoch's 1000 are shared 30 : 10, so 750 and 250: language 1's
  // samples are trained 2.5 times an epoch, each once per cycle, 10 times in 4 epochs.
  Mixed mixed = make_mixture({1000}, {1.0});
  label(mixed, [](size_t, int64_t i) { return i % 10 == 3 ? 1u : 0u; }, [](size_t, int64_t) { return 0u; });
  mixed.config.mixture_temperature = 0.5;
  mixed.config.mixture_unit = MixtureUnit::language;
  const auto shares = mixture_unit_shares(mixed.split, mixed.config);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].quota, 750 * kMixtureQuotaUnit);
  EXPECT_EQ(shares[1].quota, 250 * kMixtureQuotaUnit);
  EXPECT_EQ(shares[1].samples, 100);
  const auto counts = run_epochs(mixed, 3, 4);
  for (int64_t i = 3; i < 1000; i += 10) ASSERT_EQ(counts.at(i), 10) << "sample " << i;
  const auto totals = per_language(mixed, counts);
  EXPECT_EQ(totals.at(0), 3000);  // 3.33 cycles: every sample 3 or 4 times
  EXPECT_EQ(totals.at(1), 1000);
  for (int64_t i = 0; i < 1000; ++i) {
    if (i % 10 != 3) {
      ASSERT_TRUE(counts.at(i) == 3 || counts.at(i) == 4) << "sample " << i << ": " << counts.at(i);
    }
  }
}

TEST(MixturePlan, TemperedLanguagesOfSeveralCachesKeepEachCachesWeightWithinALanguage) {
  // Cache 0 (weight 1): 600 of language 0, 200 of language 1; cache 1 (weight 2): 100 of language 1.
  // Masses: language 0 600, language 1 200 + 2 x 100 = 400; the epoch's 1000 shared at a = 0.5 as
  // sqrt(600) : sqrt(400), then language 1's share split 200 : 200 between its two cells.
  Mixed mixed = make_mixture({800, 100}, {1.0, 2.0});
  label(mixed, [](size_t c, int64_t i) { return c == 0 && i < 600 ? 0u : 1u; }, [](size_t, int64_t) { return 0u; });
  mixed.config.mixture_temperature = 0.5;
  mixed.config.mixture_unit = MixtureUnit::language;
  const double language_0 = 1000.0 * std::sqrt(600.0) / (std::sqrt(600.0) + std::sqrt(400.0));
  const auto shares = mixture_unit_shares(mixed.split, mixed.config);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_NEAR(static_cast<double>(shares[0].quota) / kMixtureQuotaUnit, language_0, 1e-3);
  EXPECT_NEAR(static_cast<double>(shares[1].quota) / kMixtureQuotaUnit, 1000.0 - language_0, 1e-3);
  // One epoch: corpus 1's cell holds half of language 1's share.
  const BatchPlan plan = BatchPlan::build(mixed.split, mixed.config, 2, 0);
  EXPECT_NEAR(static_cast<double>(plan.owed_per_corpus()[1]), (1000.0 - language_0) / 2, 1.0);
  // (Each cell's epoch is whole samples, floored: corpus 0's two cells may lose a sample each.)
  EXPECT_NEAR(static_cast<double>(plan.owed_per_corpus()[0]), language_0 + (1000.0 - language_0) / 2, 2.0);
  // At a = 1 each language's share is its mass: the same per-corpus epoch as tempering corpora.
  mixed.config.mixture_temperature = 1.0;
  BatchPlanConfig by_corpus = mixed.config;
  by_corpus.mixture_unit = MixtureUnit::corpus;
  EXPECT_EQ(BatchPlan::build(mixed.split, mixed.config, 2, 0).owed_per_corpus(),
            BatchPlan::build(mixed.split, by_corpus, 2, 0).owed_per_corpus());
}

TEST(MixturePlan, TemperedSpeakersAreEachSeenAsPowersOfTheirSamples) {
  // Four speakers of 400, 100, 100 and 100 samples at a = 0.5: shares 20 : 10 : 10 : 10 of 700.
  Mixed mixed = make_mixture({700}, {1.0});
  label(mixed, [](size_t, int64_t) { return 0u; },
        [](size_t, int64_t i) { return i < 400 ? 0u : static_cast<uint32_t>(1 + (i - 400) / 100); });
  mixed.config.mixture_temperature = 0.5;
  mixed.config.mixture_unit = MixtureUnit::speaker;
  const auto shares = mixture_unit_shares(mixed.split, mixed.config);
  ASSERT_EQ(shares.size(), 4u);
  const int64_t expected[] = {280, 140, 140, 140};
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(shares[s].quota, expected[s] * kMixtureQuotaUnit) << "speaker " << s;
  // Over 5 epochs a 100-sample speaker's 700 copies are 7 whole cycles: each sample 7 times; the
  // 400-sample speaker's 1400 are 3.5 cycles.
  const auto counts = run_epochs(mixed, 2, 5);
  for (int64_t i = 400; i < 700; ++i) ASSERT_EQ(counts.at(i), 7) << "sample " << i;
  for (int64_t i = 0; i < 400; ++i) ASSERT_TRUE(counts.at(i) == 3 || counts.at(i) == 4) << "sample " << i;
}

TEST(MixturePlan, TheUnitIsPartOfTheFingerprintAndABadOneIsAConfigError) {
  Mixed mixed = make_mixture({300, 100}, {1.0, 0.5});
  label(mixed, [](size_t, int64_t i) { return static_cast<uint32_t>(i % 2); }, [](size_t c, int64_t) { return static_cast<uint32_t>(c); });
  const std::string by_corpus = BatchPlan::fingerprint_of(mixed.split, mixed.config, 2);
  mixed.config.mixture_unit = MixtureUnit::language;
  const std::string by_language = BatchPlan::fingerprint_of(mixed.split, mixed.config, 2);
  EXPECT_NE(by_language, by_corpus);
  // The samples' languages are part of it too: relabelled samples are another plan.
  Mixed relabelled = mixed;
  label(relabelled, [](size_t, int64_t i) { return static_cast<uint32_t>(i % 3); }, [](size_t c, int64_t) { return static_cast<uint32_t>(c); });
  EXPECT_NE(BatchPlan::fingerprint_of(relabelled.split, relabelled.config, 2), by_language);
  // A checkpoint of the corpus-tempered run does not resume as a language-tempered one.
  BatchPlanConfig corpus_config = mixed.config;
  corpus_config.mixture_unit = MixtureUnit::corpus;
  const PlanSchedule run(mixed.split, corpus_config, 2);
  PlanSchedule changed(mixed.split, mixed.config, 2);
  EXPECT_THROW(changed.resume(run.record(run.epoch_start(1) + 1)), ConfigError);
  EXPECT_EQ(parse_mixture_unit("speaker"), MixtureUnit::speaker);
  try {
    parse_mixture_unit("languages");
    FAIL() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("train.mixture_temperature_over = \"languages\""), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace sluice::runtime
