// inspect_cache: totals, fixed-bin histograms, per-language/speaker counts, vocabulary coverage.
#include "cache/cache_inspector.h"

#include "cache/cache_index.h"
#include "cache_test_util.h"

namespace sluice::cache {
namespace {

namespace fs = std::filesystem;

TEST(CacheInspector, CountsWhatWasWritten) {
  testing::ScratchDir dir;
  const int n_mels = 4;
  // Known lengths: frames 50, 150, 150, 2500 (overflow); tokens 0..; languages en/en/de/fa.
  std::vector<testing::TestSample> samples = testing::make_samples(4, n_mels, 5);
  const int64_t frames[] = {50, 150, 150, 2500};
  const std::vector<std::vector<int32_t>> tokens = {{0, 1, 2}, {2, 3}, {}, {1, 60, 61, 61}};
  const char* languages[] = {"en", "en", "de", "fa"};
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].n_frames = frames[i];
    samples[i].mel.assign(static_cast<size_t>(frames[i] * n_mels), 0.5f);
    samples[i].tokens = tokens[i];
    samples[i].language = languages[i];
    samples[i].speaker = i == 3 ? "bob" : "alice";
    samples[i].seconds = 0.5 + static_cast<double>(i);
  }
  const fs::path s0 = dir.path() / shard_file_name(0);
  const fs::path s1 = dir.path() / shard_file_name(1);
  testing::write_shard(s0, 0, n_mels, "fp", {samples[0], samples[1]}, {"{}", "{}"});
  testing::write_shard(s1, 1, n_mels, "fp", {samples[2], samples[3]});
  const nlohmann::json vocabulary = {
      {"tokens", nlohmann::json::array({"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"})}};
  finalize_cache(dir.path(), {s0, s1}, {}, vocabulary);

  const InspectResult result = inspect_cache(dir.path());
  EXPECT_EQ(result.shards, 2);
  EXPECT_EQ(result.n_mels, n_mels);
  EXPECT_EQ(result.totals.samples, 4);
  EXPECT_EQ(result.totals.frames, 2850);
  EXPECT_EQ(result.totals.tokens, 9);
  EXPECT_EQ(result.totals.rejects, 2);
  EXPECT_DOUBLE_EQ(result.totals.seconds, 8.0);

  EXPECT_EQ(result.frames.bin_width, 100);
  EXPECT_EQ(result.frames.counts[0], 1);
  EXPECT_EQ(result.frames.counts[1], 2);
  EXPECT_EQ(result.frames.overflow, 1);
  EXPECT_EQ(result.frames.min, 50);
  EXPECT_EQ(result.frames.max, 2500);
  EXPECT_DOUBLE_EQ(result.frames.mean, 712.5);
  EXPECT_EQ(result.tokens.counts[0], 4);  // 3, 2, 0, 4 tokens: all in [0, 20)
  EXPECT_EQ(result.seconds.counts[0], 1);
  EXPECT_EQ(result.seconds.counts[1], 1);
  EXPECT_EQ(result.seconds.counts[3], 1);

  ASSERT_EQ(result.languages.size(), 3u);
  EXPECT_EQ(result.languages[0].name, "en");
  EXPECT_EQ(result.languages[0].samples, 2);
  EXPECT_DOUBLE_EQ(result.languages[0].seconds, 2.0);
  ASSERT_EQ(result.speakers.size(), 2u);
  EXPECT_EQ(result.speakers[0].name, "alice");
  EXPECT_EQ(result.speakers[0].samples, 3);

  EXPECT_EQ(result.vocabulary.vocabulary_size, 10);
  EXPECT_EQ(result.vocabulary.distinct_ids, 6);  // 0 1 2 3 60 61
  EXPECT_EQ(result.vocabulary.used_in_range, 4);
  EXPECT_EQ(result.vocabulary.out_of_range, 2);
  EXPECT_EQ(result.vocabulary.min_id, 0);
  EXPECT_EQ(result.vocabulary.max_id, 61);

  // Every mel value is 0.5: per-bin mean 0.5 and std 0 over all 2850 frames.
  ASSERT_TRUE(result.mel_statistics.has_value());
  EXPECT_EQ(result.mel_statistics->frames, 2850);
  EXPECT_EQ(result.mel_statistics->mean, std::vector<float>(n_mels, 0.5f));
  EXPECT_EQ(result.mel_statistics->stddev, std::vector<float>(n_mels, 0.0f));

  const std::string text = result.to_text();
  EXPECT_NE(text.find("4 samples"), std::string::npos) << text;
  EXPECT_NE(text.find("mel statistics: 2850 frames, 4 bins, mean 0.5 .. 0.5, std 0 .. 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("OUTSIDE the vocabulary"), std::string::npos) << text;
  const nlohmann::json j = result.to_json();
  EXPECT_EQ(j["histograms"]["frames"]["overflow"], 1);
  EXPECT_EQ(j["vocabulary"]["distinct_ids"], 6);
  EXPECT_EQ(j["languages"][0]["name"], "en");
  EXPECT_EQ(j["mel_statistics"]["frames"], 2850);
  EXPECT_EQ(j["mel_statistics"]["mean"].size(), 4u);
}

TEST(CacheInspector, VocabularyWithoutSizeIsUnknown) {
  testing::ScratchDir dir;
  testing::build_cache(dir.path(), 1, 3, 8, "fp", {}, nlohmann::json{{"kind", "phonemes"}});
  const InspectResult result = inspect_cache(dir.path());
  EXPECT_EQ(result.vocabulary.vocabulary_size, -1);
  EXPECT_GT(result.vocabulary.distinct_ids, 0);
  EXPECT_NE(result.to_text().find("gives no size"), std::string::npos);
}

}  // namespace
}  // namespace sluice::cache
