// Index and manifest built from the shards; CacheReader open/read/read_batch; clear errors.
#include "cache/cache_reader.h"

#include <fstream>
#include <thread>

#include "cache/cache_index.h"
#include "cache/manifest.h"
#include "cache_test_util.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::TestSample;

void expect_sample(const Sample& sample, const TestSample& expected, int64_t index, int n_mels) {
  EXPECT_EQ(sample.index, index);
  EXPECT_EQ(sample.id, expected.id);
  EXPECT_EQ(sample.n_frames, expected.n_frames);
  EXPECT_EQ(sample.n_mels, n_mels);
  EXPECT_EQ(sample.mel, expected.mel) << expected.id;
  EXPECT_EQ(sample.tokens, expected.tokens) << expected.id;
}

template <class F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const CacheError& error) {
    return error.what();
  }
  return "(no CacheError)";
}

TEST(FinalizeCache, WritesIndexAndManifestFromTheShards) {
  ScratchDir dir;
  const auto samples = testing::build_cache(dir.path(), 3, 10, 16, "fp-x");
  const Manifest m = Manifest::read(dir.path());
  EXPECT_EQ(m.format_version, 1);
  EXPECT_EQ(m.fingerprint, "fp-x");
  EXPECT_EQ(m.settings["hop"], 256);
  EXPECT_EQ(m.vocabulary["size"], 100);
  EXPECT_EQ(m.languages, (std::vector<std::string>{"de", "en", "fa"}));  // sorted
  EXPECT_EQ(m.speakers.size(), 5u);
  ASSERT_EQ(m.shards.size(), 3u);
  int64_t frames = 0, tokens = 0;
  double seconds = 0;
  for (int s = 0; s < 3; ++s) {
    int64_t shard_frames = 0;
    for (int i = 0; i < 10; ++i) shard_frames += samples[static_cast<size_t>(s * 10 + i)].n_frames;
    EXPECT_EQ(m.shards[s].file, shard_file_name(s));
    EXPECT_EQ(m.shards[s].samples, 10);
    EXPECT_EQ(m.shards[s].frames, shard_frames);
    EXPECT_EQ(m.shards[s].rejects, 1);
    EXPECT_EQ(m.shards[s].bytes,
              static_cast<int64_t>(fs::file_size(dir.path() / m.shards[s].file)));
  }
  for (const auto& s : samples) {
    frames += s.n_frames;
    tokens += static_cast<int64_t>(s.tokens.size());
    seconds += s.seconds;
  }
  EXPECT_EQ(m.totals.samples, 30);
  EXPECT_EQ(m.totals.frames, frames);
  EXPECT_EQ(m.totals.tokens, tokens);
  EXPECT_EQ(m.totals.rejects, 3);
  EXPECT_NEAR(m.totals.seconds, seconds, 1e-9);
  // The JSON on disk has the documented keys.
  std::ifstream in(dir.path() / "manifest.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["format"], "sluice-cache");
  EXPECT_EQ(j["index"], "index.h5");
  EXPECT_EQ(j["shards"][0]["file"], "shard-00000.h5");
  for (const char* key : {"samples", "frames", "tokens", "seconds", "rejects"}) {
    EXPECT_TRUE(j["totals"].contains(key)) << key;
  }
  EXPECT_EQ(j["created"].get<std::string>().size(), 20u);  // 2025-01-31T12:00:00Z
  // No temporaries are left behind.
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }

  const IndexColumns index = read_index(dir.path() / "index.h5");
  ASSERT_EQ(index.size(), 30);
  EXPECT_EQ(index.fingerprint, "fp-x");
  EXPECT_EQ(index.n_mels, 16);
  for (int64_t i = 0; i < 30; ++i) {
    const TestSample& s = samples[static_cast<size_t>(i)];
    EXPECT_EQ(index.ids[i], s.id);
    EXPECT_EQ(index.shard[i], static_cast<uint32_t>(i / 10));
    EXPECT_EQ(index.row[i], static_cast<uint32_t>(i % 10));
    EXPECT_EQ(index.n_frames[i], s.n_frames);
    EXPECT_EQ(index.n_tokens[i], static_cast<int32_t>(s.tokens.size()));
    EXPECT_EQ(index.seconds[i], static_cast<float>(s.seconds));
    EXPECT_EQ(m.languages[index.language[i]], s.language);
    EXPECT_EQ(m.speakers[index.speaker[i]], s.speaker);
  }
}

TEST(FinalizeCache, RefusesShardsOfTwoPrepRuns) {
  ScratchDir dir;
  testing::write_shard(dir.path() / shard_file_name(0), 0, 8, "fp-a",
                       testing::make_samples(2, 8, 1));
  testing::write_shard(dir.path() / shard_file_name(1), 1, 8, "fp-b",
                       testing::make_samples(2, 8, 2));
  const std::string message =
      error_of([&] { finalize_cache(dir.path(), list_shard_files(dir.path()), {}, {}); });
  EXPECT_NE(message.find("shard-00001.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("fingerprint"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.path() / "manifest.json"));
}

TEST(FinalizeCache, RefusesDuplicateIds) {
  ScratchDir dir;
  auto samples = testing::make_samples(2, 8, 1);
  testing::write_shard(dir.path() / shard_file_name(0), 0, 8, "fp", samples);
  testing::write_shard(dir.path() / shard_file_name(1), 1, 8, "fp", {samples[1]});
  const std::string message =
      error_of([&] { finalize_cache(dir.path(), list_shard_files(dir.path()), {}, {}); });
  EXPECT_NE(message.find("'" + samples[1].id + "' appears twice"), std::string::npos) << message;
}

TEST(CacheReader, ReadsEverySampleExactly) {
  ScratchDir dir;
  const auto samples = testing::build_cache(dir.path(), 3, 12, 16);
  CacheReader reader = CacheReader::open(dir.path());
  ASSERT_EQ(reader.size(), 36);
  EXPECT_EQ(reader.n_mels(), 16);
  EXPECT_EQ(reader.manifest()["fingerprint"], "fp-test");
  for (int64_t i = 0; i < reader.size(); ++i) {
    EXPECT_EQ(reader.entry(i).id, samples[static_cast<size_t>(i)].id);
    EXPECT_EQ(reader.entry(i).shard, static_cast<uint32_t>(i / 12));
    expect_sample(reader.read(i), samples[static_cast<size_t>(i)], i, 16);
  }
}

TEST(CacheReader, ReadBatchReturnsTheCallersOrder) {
  ScratchDir dir;
  const auto samples = testing::build_cache(dir.path(), 3, 12, 16, "fp", ShardWriterOptions{32, 0});
  CacheReader reader = CacheReader::open(dir.path());
  // Unsorted, with runs of adjacent rows (4,5,6), a run across a shard boundary (11,12),
  // duplicates (5 twice, 30 twice) and lone rows.
  const std::vector<int64_t> indices = {30, 6, 12, 4, 35, 5, 0, 11, 5, 30, 23};
  std::vector<Sample> batch = reader.read_batch(indices);
  ASSERT_EQ(batch.size(), indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    expect_sample(batch[k], samples[static_cast<size_t>(indices[k])], indices[k], 16);
  }
  // A whole shard in one run, reversed.
  std::vector<int64_t> whole;
  for (int64_t i = 23; i >= 12; --i) whole.push_back(i);
  batch = reader.read_batch(whole);
  for (size_t k = 0; k < whole.size(); ++k) {
    expect_sample(batch[k], samples[static_cast<size_t>(whole[k])], whole[k], 16);
  }
  EXPECT_TRUE(reader.read_batch({}).empty());
}

TEST(CacheReader, ConcurrentReadsAreSerialisedAndCorrect) {
  ScratchDir dir;
  const auto samples = testing::build_cache(dir.path(), 2, 20, 16);
  CacheReader reader = CacheReader::open(dir.path());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        std::vector<int64_t> indices;
        for (int k = 0; k < 5; ++k) indices.push_back((t * 7 + round * 3 + k * 11) % 40);
        for (const Sample& s : reader.read_batch(indices)) {
          if (s.mel != samples[static_cast<size_t>(s.index)].mel) ++mismatches[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(CacheReader, MissingDirectoryErrorsClearly) {
  ScratchDir dir;
  const fs::path missing = dir.path() / "no-cache-here";
  const std::string message = error_of([&] { CacheReader::open(missing); });
  EXPECT_NE(message.find(missing.string()), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("sluice prep"), std::string::npos) << message;
}

TEST(CacheReader, UnfinishedCacheErrorsClearly) {
  ScratchDir dir;
  testing::write_shard(dir.path() / shard_file_name(0), 0, 8, "fp", testing::make_samples(2, 8, 1));
  const std::string message = error_of([&] { CacheReader::open(dir.path()); });
  EXPECT_NE(message.find("manifest.json is missing"), std::string::npos) << message;
  EXPECT_NE(message.find("sluice prep"), std::string::npos) << message;
}

// A corpus folder passed where a cache belongs (`sluice train --cache CORPUS`) is named as a corpus,
// with the prep command that makes a cache of it; a prep's own leftovers still read as unfinished.
TEST(CacheReader, ACorpusWhereACacheBelongsIsNamed) {
  ScratchDir dir;
  std::ofstream(dir.path() / "metadata.csv") << "LJ001-0001|Text|Text\n";
  fs::create_directories(dir.path() / "wavs");
  const std::string message = error_of([&] { CacheReader::open(dir.path()); });
  EXPECT_NE(message.find("it holds a corpus (metadata.csv), not a cache"), std::string::npos) << message;
  EXPECT_NE(message.find("sluice prep --corpus " + dir.path().string() + " --out CACHE_DIR"), std::string::npos)
      << message;
  ScratchDir unfinished;
  std::ofstream(unfinished.path() / "rejects.jsonl") << "{}\n";
  const std::string unfinished_message = error_of([&] { CacheReader::open(unfinished.path()); });
  EXPECT_NE(unfinished_message.find("manifest.json is missing"), std::string::npos) << unfinished_message;
}

TEST(CacheReader, OtherFormatVersionErrorsClearly) {
  ScratchDir dir;
  testing::build_cache(dir.path(), 1, 3);
  nlohmann::json j = Manifest::read(dir.path()).to_json();
  j["format_version"] = 3;
  std::ofstream(dir.path() / "manifest.json") << j.dump();
  const std::string message = error_of([&] { CacheReader::open(dir.path()); });
  EXPECT_NE(message.find("format_version 3"), std::string::npos) << message;
  EXPECT_NE(message.find("reads versions 1 to 2"), std::string::npos) << message;
  // Version 2 is float16 mels: a version 2 manifest of float32 mels is damaged.
  j["format_version"] = 2;
  std::ofstream(dir.path() / "manifest.json") << j.dump();
  const std::string float32 = error_of([&] { CacheReader::open(dir.path()); });
  EXPECT_NE(float32.find("float16 mels are version 2"), std::string::npos) << float32;
}

TEST(CacheReader, IndexOutOfRangeErrorsClearly) {
  ScratchDir dir;
  testing::build_cache(dir.path(), 1, 3);
  CacheReader reader = CacheReader::open(dir.path());
  EXPECT_NE(error_of([&] { reader.read(3); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] {
              reader.read_batch({0, -1});
            }).find("holds 3 samples"),
            std::string::npos);
  EXPECT_THROW(reader.entry(99), CacheError);
}

TEST(CacheReader, ReplacedShardIsDetectedOnOpen) {
  ScratchDir dir;
  testing::build_cache(dir.path(), 2, 3, 8, "fp");
  testing::write_shard(dir.path() / shard_file_name(1), 1, 8, "fp-other",
                       testing::make_samples(3, 8, 101, "cache", 1, 300));
  // Opening compares every shard's size with the manifest's (the replacement is smaller here), so
  // it is named before anything is read.
  const std::string message = error_of([&] { (void)CacheReader::open(dir.path()); });
  EXPECT_NE(message.find("shard-00001.h5 has "), std::string::npos) << message;
  EXPECT_NE(message.find("replaced"), std::string::npos) << message;
  EXPECT_NE(message.find("sluice cache verify"), std::string::npos) << message;
}

}  // namespace
}  // namespace sluice::cache
