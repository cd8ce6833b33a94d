#pragma once
// Shared by the cache tests: a scratch directory per test and synthetic samples whose every value
// is known, so reads can be compared exactly.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cache/cache_index.h"
#include "cache/shard_reader.h"
#include "cache/shard_writer.h"

namespace sluice::cache::testing {

// A fresh directory under the system temp dir, removed after the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sluice-cache-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct TestSample {
  std::string id, text, language, speaker;
  std::vector<float> mel;
  std::vector<int32_t> tokens;
  double seconds = 0;
  int64_t n_frames = 0;

  ShardSample view() const {
    ShardSample s;
    s.id = id;
    s.text = text;
    s.language = language;
    s.speaker = speaker;
    s.mel = mel.data();
    s.n_frames = n_frames;
    s.tokens = tokens.data();
    s.n_tokens = static_cast<int64_t>(tokens.size());
    s.seconds = seconds;
    return s;
  }
};

// Random lengths in [min_frames, max_frames] and [min_tokens, max_tokens]; values from seed.
inline std::vector<TestSample> make_samples(int count, int n_mels, uint32_t seed,
                                            const std::string& id_prefix = "s", int min_frames = 1,
                                            int max_frames = 700, int min_tokens = 0,
                                            int max_tokens = 180) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> frames(min_frames, max_frames);
  std::uniform_int_distribution<int> token_count(min_tokens, max_tokens);
  std::uniform_int_distribution<int32_t> token(0, 99);
  std::normal_distribution<float> value(-4.0f, 2.5f);
  const char* languages[] = {"en", "de", "fa"};
  const char* texts[] = {"Printing, in the only sense with which we are at present concerned.",
                         "Grüße aus Köln — “quoted” text.", "سلام دنیا", "日本語のテキスト", ""};
  std::vector<TestSample> samples(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    TestSample& s = samples[static_cast<size_t>(i)];
    s.id = id_prefix + "-" + std::to_string(seed) + "-" + std::to_string(i);
    s.text = texts[i % 5] + std::string(" #") + std::to_string(i);
    s.language = languages[i % 3];
    s.speaker = "speaker" + std::to_string((i * 7) % 5);
    s.n_frames = frames(random);
    s.mel.resize(static_cast<size_t>(s.n_frames * n_mels));
    for (float& v : s.mel) v = value(random);
    s.tokens.resize(static_cast<size_t>(token_count(random)));
    for (int32_t& t : s.tokens) t = token(random);
    s.seconds = static_cast<double>(s.n_frames) * 256.0 / 22050.0;
  }
  return samples;
}

inline void write_shard(const std::filesystem::path& path, int shard, int n_mels,
                        const std::string& fingerprint, const std::vector<TestSample>& samples,
                        const std::vector<std::string>& rejects = {},
                        ShardWriterOptions options = {}) {
  ShardWriter writer(path, shard, n_mels, fingerprint, options);
  for (const TestSample& s : samples) writer.append(s.view());
  for (const std::string& r : rejects) writer.add_reject(r);
  writer.commit();
}

// A finished cache of `shards` shards of `per_shard` samples each; returns the samples in cache
// order.
inline std::vector<TestSample> build_cache(const std::filesystem::path& dir, int shards,
                                           int per_shard, int n_mels = 16,
                                           const std::string& fingerprint = "fp-test",
                                           ShardWriterOptions options = {},
                                           const nlohmann::json& vocabulary = {{"size", 100}}) {
  std::vector<TestSample> all;
  std::vector<std::filesystem::path> files;
  for (int shard = 0; shard < shards; ++shard) {
    std::vector<TestSample> samples =
        make_samples(per_shard, n_mels, static_cast<uint32_t>(100 + shard), "cache", 1, 300);
    files.push_back(dir / shard_file_name(shard));
    write_shard(files.back(), shard, n_mels, fingerprint, samples,
                {R"({"id":"bad-)" + std::to_string(shard) + R"(","reason":"too_short"})"}, options);
    all.insert(all.end(), samples.begin(), samples.end());
  }
  nlohmann::json settings{{"n_mels", n_mels}, {"hop", 256}};
  if (options.float16_mels) settings["cache"] = {{"mel_dtype", "float16"}};  // as prep's output settings
  finalize_cache(dir, files, settings, vocabulary);
  return all;
}

}  // namespace sluice::cache::testing
