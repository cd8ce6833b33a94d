#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "runtime/prep/prep_plan.h"

namespace sluice::runtime {
namespace {

TEST(LongestFirst, OrdersShardsByDurationThenNumber) {
  const std::vector<double> seconds = {10, 100, 10, 50, 10};
  EXPECT_EQ(longest_first(seconds), (std::vector<int64_t>{1, 3, 0, 2, 4}));
}

PrepPlan plan_of(int64_t shards) {
  std::vector<ItemProbe> probes(static_cast<size_t>(shards));
  // Row i lasts i + 1 s: with one row per shard the longest shard is the last one.
  for (size_t i = 0; i < probes.size(); ++i) probes[i].seconds = double(i + 1);
  return make_plan("fp", 1, probes);
}

TEST(ShardDispenser, EveryShardGoesOutOnceFirstShardsIncluded) {
  const PrepPlan plan = plan_of(100);
  const int ranks = 3;
  std::vector<int64_t> out;
  for (int rank = 0; rank < ranks; ++rank) out.push_back(*plan.first_shard(rank));
  EXPECT_EQ(out, (std::vector<int64_t>{99, 98, 97}));  // the longest go out first
  ShardDispenser dispenser(plan, ranks);
  std::vector<size_t> pieces;
  while (true) {
    const auto piece = dispenser.next();
    if (piece.empty()) break;
    pieces.push_back(piece.size());
    out.insert(out.end(), piece.begin(), piece.end());
  }
  std::vector<int64_t> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), int64_t{0});
  EXPECT_EQ(sorted, all);
  EXPECT_EQ(dispenser.left(), 0);
  EXPECT_TRUE(dispenser.next().empty());
  // Guided: ceil(left / 12) each time, 97 left: 9, then 8 of 88, ... down to single shards.
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_EQ(pieces.front(), 9u);
  EXPECT_TRUE(std::is_sorted(pieces.rbegin(), pieces.rend())) << "pieces never grow";
  EXPECT_EQ(pieces.back(), 1u);
  EXPECT_LT(pieces.size(), 40u) << "far fewer requests than shards";
}

TEST(ShardDispenser, FewerShardsThanRanksAndStop) {
  const PrepPlan plan = plan_of(2);
  EXPECT_TRUE(plan.first_shard(0).has_value());
  EXPECT_TRUE(plan.first_shard(1).has_value());
  EXPECT_FALSE(plan.first_shard(2).has_value());
  ShardDispenser none_left(plan, 4);
  EXPECT_TRUE(none_left.next().empty());

  ShardDispenser stopped(plan_of(50), 2);
  EXPECT_FALSE(stopped.next().empty());
  stopped.stop();
  EXPECT_EQ(stopped.left(), 0);
  EXPECT_TRUE(stopped.next().empty());
}

TEST(MakePlan, ShardRangesCoverEveryRowOnce) {
  std::vector<ItemProbe> probes(10);
  for (size_t i = 0; i < probes.size(); ++i) probes[i].seconds = double(i + 1);
  const PrepPlan plan = make_plan("fp", 4, probes);
  ASSERT_EQ(plan.shard_count(), 3);
  EXPECT_EQ(plan.shard_begin(2), 8);
  EXPECT_EQ(plan.shard_end(2), 10);
  EXPECT_EQ(plan.shard_order, (std::vector<int64_t>{1, 2, 0}));  // 26 s, 19 s, 10 s
  const PrepPlan again = PrepPlan::from_json(plan.to_json());
  EXPECT_EQ(again.shard_order, plan.shard_order);
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
