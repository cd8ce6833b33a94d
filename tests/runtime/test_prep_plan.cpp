#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "runtime/prep/prep_plan.h"

namespace sluice::runtime {
namespace {

TEST(AssignShards, BalancesByDurationNotCount) {
  // One long shard and many short ones: by count rank 0 would get 3 shards incl. the long one.
  const std::vector<double> seconds = {100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10};
  const auto owner = assign_shards(seconds, 2);
  std::vector<double> load(2, 0);
  for (size_t s = 0; s < seconds.size(); ++s) load[static_cast<size_t>(owner[s])] += seconds[s];
  EXPECT_DOUBLE_EQ(load[0], 100);
  EXPECT_DOUBLE_EQ(load[1], 100);
  EXPECT_EQ(owner, assign_shards(seconds, 2));  // deterministic
}

TEST(AssignShards, EveryRankGetsWorkWhenThereIsEnough) {
  const std::vector<double> seconds(7, 5.0);
  const auto owner = assign_shards(seconds, 3);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_GE(std::count(owner.begin(), owner.end(), rank), 2);
  }
}

TEST(MakePlan, ShardRangesCoverEveryRowOnce) {
  std::vector<ItemProbe> probes(10);
  for (size_t i = 0; i < probes.size(); ++i) probes[i].seconds = double(i + 1);
  const PrepPlan plan = make_plan("fp", 4, probes, 2);
  ASSERT_EQ(plan.shard_count(), 3);
  EXPECT_EQ(plan.shard_begin(2), 8);
  EXPECT_EQ(plan.shard_end(2), 10);
  const PrepPlan again = PrepPlan::from_json(plan.to_json());
  EXPECT_EQ(again.shard_owner, plan.shard_owner);
  EXPECT_EQ(again.item_seconds, plan.item_seconds);
  EXPECT_EQ(again.fingerprint, "fp");
}

TEST(Fingerprint, ChangesWithSettingsVocabularyTextAndFiles) {
  dataset::CorpusListing listing;
  listing.root = "/corpus";
  listing.format = "ljspeech";
  listing.items.push_back({"metadata.csv:1", "a", "/corpus/wavs/a.wav", "hello", "s", "", {}, "", {}});
  std::vector<ItemProbe> probes = {{1.5, 1000, 42}};
  const nlohmann::json settings = {{"features", {{"n_mels", 80}}}};
  const nlohmann::json vocabulary = {{"version", "chars-v1"}};
  const std::string base = compute_fingerprint(settings, vocabulary, listing, probes);
  EXPECT_EQ(base, compute_fingerprint(settings, vocabulary, listing, probes));

  EXPECT_NE(base, compute_fingerprint({{"features", {{"n_mels", 81}}}}, vocabulary, listing, probes));
  EXPECT_NE(base, compute_fingerprint(settings, {{"version", "chars-v2"}}, listing, probes));
  auto touched = probes;
  touched[0].mtime_ns = 43;
  EXPECT_NE(base, compute_fingerprint(settings, vocabulary, listing, touched));
  auto resized = probes;
  resized[0].bytes = 1001;
  EXPECT_NE(base, compute_fingerprint(settings, vocabulary, listing, resized));
  auto retexted = listing;
  retexted.items[0].text = "hullo";
  EXPECT_NE(base, compute_fingerprint(settings, vocabulary, retexted, probes));
  // Moving the whole corpus elsewhere keeps the fingerprint: paths are hashed relative to the root.
  auto moved = listing;
  moved.root = "/elsewhere";
  moved.items[0].audio = "/elsewhere/wavs/a.wav";
  EXPECT_EQ(base, compute_fingerprint(settings, vocabulary, moved, probes));
}

}  // namespace
}  // namespace sluice::runtime
