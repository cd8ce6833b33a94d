// The shard format is readable by h5py with no sluice code: a Python script (dump_shard.py, run
// with the system Python that has h5py) dumps a shard written here, and every value must equal
// what ShardReader returns.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/shard_reader.h"
#include "cache_test_util.h"

namespace sluice::cache {
namespace {

namespace fs = std::filesystem;

std::string run_command(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[65536];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  status = pclose(pipe);
  return output;
}

TEST(H5pyInterop, PythonReadsTheSameValuesAsShardReader) {
  if (!fs::exists(SLUICE_SYSTEM_PYTHON)) GTEST_SKIP() << SLUICE_SYSTEM_PYTHON << " not found";
  testing::ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(12);
  const int n_mels = 8;
  auto samples = testing::make_samples(9, n_mels, 77, "py", 1, 60);
  testing::write_shard(path, 12, n_mels, "fp-python", samples,
                       {R"({"id":"gone","reason":"missing_audio"})"}, ShardWriterOptions{16, 0});

  int status = -1;
  const std::string output =
      run_command(std::string(SLUICE_SYSTEM_PYTHON) + " " + SLUICE_CACHE_TEST_DIR +
                      "/dump_shard.py " + path.string(),
                  status);
  ASSERT_EQ(status, 0) << output;
  const nlohmann::json dump = nlohmann::json::parse(output);

  ShardReader reader(path);
  EXPECT_EQ(dump["attrs"]["format"], "sluice-shard");
  EXPECT_EQ(dump["attrs"]["format_version"], 1);
  EXPECT_EQ(dump["attrs"]["fingerprint"], reader.info().fingerprint);
  EXPECT_EQ(dump["attrs"]["shard"], 12);
  EXPECT_EQ(dump["attrs"]["n_mels"], n_mels);
  EXPECT_EQ(dump["attrs"]["strings_xxh64"], reader.info().strings_xxh64);

  for (const char* name :
       {"mel", "mel_offsets", "tokens", "token_offsets", "seconds", "mel_sum", "mel_sum_sq"}) {
    ASSERT_TRUE(dump["datasets"].contains(name)) << name;
    EXPECT_TRUE(dump["datasets"][name]["fletcher32"].get<bool>()) << name;
    EXPECT_FALSE(dump["datasets"][name]["chunks"].is_null()) << name;
  }
  // Variable-length strings: chunked, but HDF5 allows no filter on them; strings_xxh64 covers
  // their bytes instead.
  for (const char* name : {"id", "text", "language", "speaker", "rejects"}) {
    ASSERT_TRUE(dump["datasets"].contains(name)) << name;
    EXPECT_FALSE(dump["datasets"][name]["chunks"].is_null()) << name;
    EXPECT_EQ(dump["datasets"][name]["dtype"], "vlen-str") << name;
  }
  EXPECT_EQ(dump["datasets"]["mel"]["dtype"], "<f4");
  EXPECT_EQ(dump["datasets"]["mel"]["chunks"], nlohmann::json({16, n_mels}));
  EXPECT_EQ(dump["datasets"]["mel_offsets"]["dtype"], "<i8");
  EXPECT_EQ(dump["datasets"]["tokens"]["dtype"], "<i4");
  EXPECT_EQ(dump["datasets"]["seconds"]["dtype"], "<f8");
  EXPECT_EQ(dump["datasets"]["id"]["dtype"], "vlen-str");
  EXPECT_EQ(dump["datasets"]["mel_sum"]["dtype"], "<f8");
  EXPECT_EQ(dump["datasets"]["mel_sum"]["shape"], nlohmann::json({n_mels}));
  EXPECT_EQ(dump["datasets"]["mel_sum_sq"]["shape"], nlohmann::json({n_mels}));
  // The stored per-bin sums are what numpy computes from /mel.
  for (const char* name : {"mel_sum", "mel_sum_sq"}) {
    const std::vector<double> stored = dump[name];
    const std::vector<double> numpy = dump[std::string(name) + "_numpy"];
    ASSERT_EQ(stored.size(), static_cast<size_t>(n_mels)) << name;
    ASSERT_EQ(numpy.size(), static_cast<size_t>(n_mels)) << name;
    for (int b = 0; b < n_mels; ++b) {
      EXPECT_NEAR(stored[b], numpy[b], 1e-9 * std::max(1.0, std::fabs(numpy[b]))) << name << b;
    }
  }

  ASSERT_EQ(dump["samples"].size(), static_cast<size_t>(reader.size()));
  for (int64_t i = 0; i < reader.size(); ++i) {
    const nlohmann::json& py = dump["samples"][static_cast<size_t>(i)];
    ShardRow row = reader.read(i);
    EXPECT_EQ(py["id"], row.id);
    EXPECT_EQ(py["text"], row.text);  // UTF-8 survives (Persian, Japanese, German)
    EXPECT_EQ(py["language"], row.language);
    EXPECT_EQ(py["speaker"], row.speaker);
    EXPECT_EQ(py["seconds"].get<double>(), row.seconds);
    EXPECT_EQ(py["n_frames"], row.n_frames);
    std::vector<float> mel;
    for (double v : py["mel"]) mel.push_back(static_cast<float>(v));
    EXPECT_EQ(mel, row.mel) << "sample " << i;
    EXPECT_EQ(py["tokens"].get<std::vector<int32_t>>(), row.tokens);
    EXPECT_EQ(row.mel, samples[static_cast<size_t>(i)].mel);
  }
  // The chunk address table matches HDF5's own chunk index, as h5py reports it.
  ASSERT_TRUE(dump.contains("mel_chunk_addresses"));
  EXPECT_EQ(dump["mel_chunk_addresses"], dump["mel_chunk_offsets_h5py"]);
  EXPECT_GT(dump["mel_chunk_addresses"].size(), 1u);
  EXPECT_TRUE(dump["datasets"]["mel_chunk_addresses"]["fletcher32"].get<bool>());
  EXPECT_EQ(dump["rejects"], nlohmann::json({R"({"id":"gone","reason":"missing_audio"})"}));
}

}  // namespace
}  // namespace sluice::cache
