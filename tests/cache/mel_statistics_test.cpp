// Per-mel-bin statistics: each shard's /mel_sum and /mel_sum_sq, the manifest's "mel_statistics"
// built from them, CacheReader::mel_statistics(), caches written before they existed, and what
// verify and inspect say about them.
#include "cache/mel_statistics.h"

#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "cache/cache_index.h"
#include "cache/cache_inspector.h"
#include "cache/cache_reader.h"
#include "cache/cache_verifier.h"
#include "cache/manifest.h"
#include "cache_test_util.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::TestSample;

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& file, const nlohmann::json& j) { std::ofstream(file) << j.dump(2); }

TestSample sample_with_frames(const std::string& id, int n_mels,
                              const std::vector<std::vector<float>>& frames) {
  TestSample s;
  s.id = id;
  s.text = "text of " + id;
  s.language = "en";
  s.speaker = "alice";
  s.n_frames = static_cast<int64_t>(frames.size());
  for (const auto& frame : frames) {
    EXPECT_EQ(frame.size(), static_cast<size_t>(n_mels));
    s.mel.insert(s.mel.end(), frame.begin(), frame.end());
  }
  s.tokens = {1, 2, 3};
  s.seconds = 0.1 * static_cast<double>(frames.size());
  return s;
}

// Removes /mel_sum and /mel_sum_sq from a shard: what a shard written before them looks like.
void strip_sums(const fs::path& shard) {
  hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << shard;
  EXPECT_GE(H5Ldelete(file, "mel_sum", H5P_DEFAULT), 0);
  EXPECT_GE(H5Ldelete(file, "mel_sum_sq", H5P_DEFAULT), 0);
  EXPECT_GE(H5Fclose(file), 0);
}

// Overwrites one value of a float64 dataset in place (through HDF5, so its checksum stays valid).
void overwrite_value(const fs::path& shard, const char* dataset, hsize_t at, double value) {
  hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << shard;
  hid_t d = H5Dopen2(file, dataset, H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  const hsize_t count = 1;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &at, nullptr, &count, nullptr);
  hid_t memory = H5Screate_simple(1, &count, nullptr);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, memory, space, H5P_DEFAULT, &value), 0);
  H5Sclose(memory);
  H5Sclose(space);
  H5Dclose(d);
  EXPECT_GE(H5Fclose(file), 0);
}

bool has_fault(const VerifyResult& result, const std::string& file, const std::string& text) {
  for (const VerifyFault& fault : result.faults) {
    if (fault.file == file && fault.problem.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(MelStatistics, ShardOfKnownValuesGivesExactMeanAndStd) {
  ScratchDir dir;
  const int n_mels = 3;
  // Bin 0 holds 1, 3, 5, 7 (mean 4, variance 5); bin 1 is constant 2 (std 0); bin 2 holds
  // 3, 5, -1, 1 (mean 2, variance 5). A sample without frames adds nothing.
  const std::vector<TestSample> samples = {
      sample_with_frames("a", n_mels, {{1, 2, 3}, {3, 2, 5}}),
      sample_with_frames("empty", n_mels, {}),
      sample_with_frames("b", n_mels, {{5, 2, -1}, {7, 2, 1}})};
  const fs::path shard = dir.path() / shard_file_name(0);
  // One frame per chunk: the sums do not depend on how /mel is chunked.
  testing::write_shard(shard, 0, n_mels, "fp", samples, {}, ShardWriterOptions{1, 0});

  const std::optional<MelSums> sums = ShardReader(shard).read_mel_sums();
  ASSERT_TRUE(sums.has_value());
  EXPECT_EQ(sums->frames, 4);
  EXPECT_EQ(sums->sum, (std::vector<double>{16, 8, 8}));
  EXPECT_EQ(sums->sum_sq, (std::vector<double>{84, 16, 36}));

  finalize_cache(dir.path(), {shard}, {}, {{"size", 10}});
  const nlohmann::json manifest = read_json(dir.path() / "manifest.json");
  ASSERT_TRUE(manifest.contains("mel_statistics"));
  EXPECT_EQ(manifest["mel_statistics"]["frames"], 4);
  EXPECT_EQ(manifest["mel_statistics"]["mean"].size(), 3u);
  EXPECT_EQ(manifest["mel_statistics"]["std"].size(), 3u);

  const CacheReader reader = CacheReader::open(dir.path());
  const MelStatistics* stats = reader.mel_statistics();
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->frames, 4);
  const float root5 = static_cast<float>(std::sqrt(5.0));
  EXPECT_EQ(stats->mean, (std::vector<float>{4.0f, 2.0f, 2.0f}));
  EXPECT_EQ(stats->stddev, (std::vector<float>{root5, 0.0f, root5}));
}

TEST(MelStatistics, VarianceNeverGoesNegativeForAConstantBin) {
  // A bin stuck at one value (e.g. log(log_floor) in a silent band): for -4.3f over 1000 frames
  // E[x^2] - E[x]^2 rounds to -5e-13 in double; unclamped, its sqrt would be NaN.
  MelSums sums(1);
  const std::vector<float> frames(1000, -4.3f);
  sums.add_frames(frames.data(), 1000);
  const double n = 1000.0;
  ASSERT_LT(sums.sum_sq[0] / n - (sums.sum[0] / n) * (sums.sum[0] / n), 0.0);
  const MelStatistics stats = sums.statistics();
  EXPECT_EQ(stats.mean[0], -4.3f);
  EXPECT_EQ(stats.stddev[0], 0.0f);
  EXPECT_EQ(MelSums(2).statistics().mean, (std::vector<float>{0.0f, 0.0f}));  // no frames
  EXPECT_THROW(sums.add(MelSums(2)), CacheError);
}

TEST(MelStatistics, ShardsOfSeveralRanksEqualTheStatisticsOfAllSamplesReadBack) {
  ScratchDir dir;
  const int n_mels = 12, ranks = 3, shards = 6, per_shard = 9;
  // Each bin gets its own scale and offset, so mixing up bins would show.
  auto samples_of_shard = [&](int shard) {
    std::vector<TestSample> samples = testing::make_samples(
        per_shard, n_mels, static_cast<uint32_t>(500 + shard), "rank", 1, 400);
    for (TestSample& s : samples) {
      for (size_t v = 0; v < s.mel.size(); ++v) {
        const int bin = static_cast<int>(v % n_mels);
        s.mel[v] = s.mel[v] * (0.5f + 0.1f * bin) - 3.0f + 0.4f * bin;
      }
    }
    return samples;
  };
  // Like the prep job: each rank is its own process and writes its own shards (round robin),
  // then one process builds the index and manifest from all of them.
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        for (int shard = rank; shard < shards; shard += ranks) {
          testing::write_shard(dir.path() / shard_file_name(shard), shard, n_mels, "fp-ranks",
                               samples_of_shard(shard), {}, ShardWriterOptions{32, 0});
        }
      } catch (...) {
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank process failed";
  }
  finalize_cache(dir.path(), list_shard_files(dir.path()), {}, {{"size", 100}});

  CacheReader reader = CacheReader::open(dir.path());
  ASSERT_EQ(reader.size(), shards * per_shard);
  // Directly over every sample read back, two-pass (mean first, then squared deviations): a
  // different formula from the sums' E[x^2] - E[x]^2.
  std::vector<double> sum(n_mels, 0.0);
  int64_t frames = 0;
  std::vector<Sample> all;
  for (int64_t i = 0; i < reader.size(); ++i) all.push_back(reader.read(i));
  for (const Sample& s : all) {
    for (int32_t f = 0; f < s.n_frames; ++f) {
      for (int b = 0; b < n_mels; ++b) sum[b] += s.mel[static_cast<size_t>(f * n_mels + b)];
    }
    frames += s.n_frames;
  }
  std::vector<double> mean(n_mels), squares(n_mels, 0.0);
  for (int b = 0; b < n_mels; ++b) mean[b] = sum[b] / static_cast<double>(frames);
  for (const Sample& s : all) {
    for (int32_t f = 0; f < s.n_frames; ++f) {
      for (int b = 0; b < n_mels; ++b) {
        const double d = s.mel[static_cast<size_t>(f * n_mels + b)] - mean[b];
        squares[b] += d * d;
      }
    }
  }
  const MelStatistics* stats = reader.mel_statistics();
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->frames, frames);
  EXPECT_EQ(stats->frames, reader.manifest()["totals"]["frames"].get<int64_t>());
  ASSERT_EQ(stats->mean.size(), static_cast<size_t>(n_mels));
  ASSERT_EQ(stats->stddev.size(), static_cast<size_t>(n_mels));
  for (int b = 0; b < n_mels; ++b) {
    const double stddev = std::sqrt(squares[b] / static_cast<double>(frames));
    EXPECT_NEAR(stats->mean[b], mean[b], 1e-5 * std::fabs(mean[b]) + 1e-6) << "bin " << b;
    EXPECT_NEAR(stats->stddev[b], stddev, 1e-5 * stddev) << "bin " << b;
  }
  // The bins really differ (scale 0.5 + 0.1 b of a std-2.5 distribution).
  EXPECT_NEAR(stats->stddev[0], 1.25, 0.1);
  EXPECT_NEAR(stats->stddev[11], 4.0, 0.3);
  const VerifyResult verified = verify_cache(dir.path());
  EXPECT_TRUE(verified.ok()) << verified.to_text();
  EXPECT_TRUE(verified.notes.empty()) << verified.to_text();
}

TEST(MelStatistics, CacheWrittenBeforeStatisticsOpensVerifiesAndInspects) {
  ScratchDir dir;
  const std::vector<TestSample> samples = testing::build_cache(dir.path(), 2, 5, 8, "fp-old");
  // An old cache: shards without the datasets, and an index and manifest built from them.
  for (const fs::path& shard : list_shard_files(dir.path())) strip_sums(shard);
  finalize_cache(dir.path(), list_shard_files(dir.path()), {}, {{"size", 100}});
  EXPECT_FALSE(read_json(dir.path() / "manifest.json").contains("mel_statistics"));
  EXPECT_FALSE(ShardReader(dir.path() / shard_file_name(0)).read_mel_sums().has_value());
  // On resume the prep job rewrites such a shard, which is how re-running prep adds statistics.
  EXPECT_FALSE(is_complete_shard(dir.path() / shard_file_name(0), "fp-old"));

  CacheReader reader = CacheReader::open(dir.path());
  EXPECT_EQ(reader.mel_statistics(), nullptr);
  EXPECT_EQ(reader.read(7).mel, samples[7].mel);

  const VerifyResult verified = verify_cache(dir.path());
  EXPECT_TRUE(verified.ok()) << verified.to_text();
  ASSERT_EQ(verified.notes.size(), 1u) << verified.to_text();
  EXPECT_NE(verified.notes[0].find("no mel_statistics"), std::string::npos) << verified.notes[0];
  EXPECT_NE(verified.notes[0].find("sluice prep"), std::string::npos) << verified.notes[0];

  const InspectResult inspected = inspect_cache(dir.path());
  EXPECT_FALSE(inspected.mel_statistics.has_value());
  const std::string text = inspected.to_text();
  EXPECT_NE(text.find("mel statistics: none"), std::string::npos) << text;
  EXPECT_NE(text.find("re-running `sluice prep`"), std::string::npos) << text;
  EXPECT_TRUE(inspected.to_json()["mel_statistics"].is_null());
}

TEST(MelStatistics, ManifestWithoutTheKeyOpensWithNoStatistics) {
  // Shards that have the sums under a manifest written before the key existed.
  ScratchDir dir;
  testing::build_cache(dir.path(), 2, 4, 8);
  nlohmann::json manifest = read_json(dir.path() / "manifest.json");
  ASSERT_TRUE(manifest.contains("mel_statistics"));
  manifest.erase("mel_statistics");
  write_json(dir.path() / "manifest.json", manifest);
  EXPECT_EQ(CacheReader::open(dir.path()).mel_statistics(), nullptr);
  const VerifyResult verified = verify_cache(dir.path());
  EXPECT_TRUE(verified.ok()) << verified.to_text();
  EXPECT_EQ(verified.notes.size(), 1u) << verified.to_text();
}

TEST(MelStatistics, VerifyFlagsTamperedManifestValues) {
  ScratchDir dir;
  testing::build_cache(dir.path(), 3, 4, 8);
  ASSERT_TRUE(verify_cache(dir.path()).ok());
  const nlohmann::json clean = read_json(dir.path() / "manifest.json");
  const fs::path path = dir.path() / "manifest.json";

  nlohmann::json tampered = clean;
  tampered["mel_statistics"]["mean"][3] = tampered["mel_statistics"]["mean"][3].get<double>() + 0.5;
  write_json(path, tampered);
  VerifyResult result = verify_cache(dir.path());
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(has_fault(result, "manifest.json", "mel_statistics.mean[3]")) << result.to_text();
  EXPECT_TRUE(has_fault(result, "manifest.json", "1 of 8 bins")) << result.to_text();

  tampered = clean;
  tampered["mel_statistics"]["std"][0] = 0.0;
  write_json(path, tampered);
  result = verify_cache(dir.path());
  EXPECT_TRUE(has_fault(result, "manifest.json", "mel_statistics.std[0]")) << result.to_text();

  tampered = clean;
  tampered["mel_statistics"]["frames"] = clean["mel_statistics"]["frames"].get<int64_t>() + 1;
  write_json(path, tampered);
  result = verify_cache(dir.path());
  EXPECT_TRUE(has_fault(result, "manifest.json", "mel_statistics.frames")) << result.to_text();

  // Fewer bins than n_mels: verify names the field, and the reader refuses to open.
  tampered = clean;
  tampered["mel_statistics"]["mean"].erase(7);
  tampered["mel_statistics"]["std"].erase(7);
  write_json(path, tampered);
  result = verify_cache(dir.path());
  EXPECT_TRUE(has_fault(result, "manifest.json", "mel_statistics.mean has 7 entries"))
      << result.to_text();
  try {
    CacheReader::open(dir.path());
    ADD_FAILURE() << "expected CacheError";
  } catch (const CacheError& error) {
    EXPECT_NE(std::string(error.what()).find("mel_statistics for 7 mel bins"), std::string::npos)
        << error.what();
  }

  // A malformed value is a manifest error naming the key.
  tampered = clean;
  tampered["mel_statistics"]["std"] = "wide";
  write_json(path, tampered);
  result = verify_cache(dir.path());
  EXPECT_TRUE(has_fault(result, "manifest.json", "mel_statistics.std")) << result.to_text();
}

TEST(MelStatistics, VerifyFlagsShardSumsThatDoNotMatchItsFrames) {
  ScratchDir dir;
  testing::build_cache(dir.path(), 2, 4, 8);
  overwrite_value(dir.path() / shard_file_name(1), "mel_sum", 5, 1234.5);
  const VerifyResult result = verify_cache(dir.path());
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(has_fault(result, "shard-00001.h5", "/mel_sum[5] is 1234.5")) << result.to_text();
  // The manifest was built from the true sums, so it no longer matches the shards either.
  EXPECT_TRUE(has_fault(result, "manifest.json", "mel_statistics.mean[5]")) << result.to_text();
}

TEST(MelStatistics, VerifyFlagsAShardWithoutSumsUnderAManifestWithStatistics) {
  ScratchDir dir;
  testing::build_cache(dir.path(), 2, 4, 8);
  strip_sums(dir.path() / shard_file_name(0));
  const VerifyResult result = verify_cache(dir.path());
  EXPECT_TRUE(has_fault(result, "manifest.json", "shard-00000.h5")) << result.to_text();
}

TEST(MelStatistics, WriterRefusesNonFiniteMelValuesAndKeepsTheShardUsable) {
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(0);
  ShardWriter writer(path, 0, 2, "fp");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  TestSample bad = sample_with_frames("bad", 2, {{1, 2}, {nan, 0}});
  try {
    writer.append(bad.view());
    ADD_FAILURE() << "expected CacheError";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'bad'"), std::string::npos) << message;
    EXPECT_NE(message.find("frame 1, bin 0 is not finite"), std::string::npos) << message;
  }
  bad.mel[3] = std::numeric_limits<float>::infinity();
  bad.mel[2] = 0.0f;
  EXPECT_THROW(writer.append(bad.view()), CacheError);
  writer.append(sample_with_frames("good", 2, {{1, 4}, {3, 4}}).view());
  writer.commit();
  ShardReader reader(path);
  EXPECT_EQ(reader.size(), 1);
  const std::optional<MelSums> sums = reader.read_mel_sums();
  ASSERT_TRUE(sums.has_value());
  EXPECT_EQ(sums->frames, 2);
  EXPECT_EQ(sums->sum, (std::vector<double>{4, 8}));
}

}  // namespace
}  // namespace sluice::cache
