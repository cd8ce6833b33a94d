// The shard format is readable by h5py with no sluice code: a Python script (dump_shard.py, run
// with the system Python that has h5py) dumps a shard written here, and every value must equal
// what ShardReader returns.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/float16.h"
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

// cache.mel_dtype: float16. h5py sees numpy float16 and shard format_version 2; its values are
// exactly what ShardReader returns (widened to float32) on both read paths (raw chunks, and
// HDF5's pipeline with deflate), and each is the written value rounded to nearest half: within
// 2^-11 of it, relative. The per-bin sums describe the stored values.
TEST(H5pyInterop, AFloat16ShardIsFloat16ForPythonAndTheRoundedValuesForSluice) {
  if (!fs::exists(SLUICE_SYSTEM_PYTHON)) GTEST_SKIP() << SLUICE_SYSTEM_PYTHON << " not found";
  for (const int gzip : {0, 1}) {
    testing::ScratchDir dir;
    const fs::path path = dir.path() / shard_file_name(3);
    const int n_mels = 8;
    auto samples = testing::make_samples(9, n_mels, 5, "half", 1, 60);
    testing::write_shard(path, 3, n_mels, "fp-half", samples, {}, ShardWriterOptions{16, gzip, true});
    int status = -1;
    const std::string output = run_command(
        std::string(SLUICE_SYSTEM_PYTHON) + " " + SLUICE_CACHE_TEST_DIR + "/dump_shard.py " + path.string(), status);
    ASSERT_EQ(status, 0) << output;
    const nlohmann::json dump = nlohmann::json::parse(output);
    EXPECT_EQ(dump["attrs"]["format_version"], 2);
    EXPECT_EQ(dump["datasets"]["mel"]["dtype"], "<f2");
    EXPECT_TRUE(dump["datasets"]["mel"]["fletcher32"].get<bool>());
    ShardReader reader(path);
    EXPECT_EQ(reader.info().format_version, 2);
    ASSERT_EQ(dump["samples"].size(), samples.size());
    double worst = 0;
    for (int64_t i = 0; i < reader.size(); ++i) {
      const ShardRow row = reader.read(i);
      std::vector<float> python;
      for (double v : dump["samples"][static_cast<size_t>(i)]["mel"]) python.push_back(static_cast<float>(v));
      EXPECT_EQ(python, row.mel) << "sample " << i << " gzip " << gzip;
      const std::vector<float>& written = samples[static_cast<size_t>(i)].mel;
      ASSERT_EQ(row.mel.size(), written.size());
      for (size_t v = 0; v < written.size(); ++v) {
        EXPECT_EQ(row.mel[v], round_to_half(written[v]));
        if (std::fabs(written[v]) >= 0x1p-14f) {
          worst = std::max(worst, std::fabs(static_cast<double>(row.mel[v]) - written[v]) / std::fabs(written[v]));
        }
      }
    }
    EXPECT_LE(worst, std::ldexp(1.0, -11));
    EXPECT_GT(worst, 0.0) << "nothing was rounded: not a float16 /mel";
    for (const char* name : {"mel_sum", "mel_sum_sq"}) {
      const std::vector<double> stored = dump[name];
      const std::vector<double> numpy = dump[std::string(name) + "_numpy"];
      for (int b = 0; b < n_mels; ++b) {
        EXPECT_NEAR(stored[b], numpy[b], 1e-9 * std::max(1.0, std::fabs(numpy[b]))) << name << b;
      }
    }
  }
}

// Every half survives float_to_half(half_to_float(h)); the bulk conversions (F16C where the CPU
// has it) agree with the scalar ones on all 65,536 halves and on values between them; floats
// round to the nearest half, ties to even.
TEST(Float16, ConversionsAreExactAndRoundToNearestEven) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> bulk(all.size());
  halves_to_floats(all.data(), bulk.data(), all.size());
  std::vector<uint16_t> back(all.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bulk[h])) << h;
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << h;
    ASSERT_EQ(bulk[h], f) << h;
  }
  floats_to_halves(bulk.data(), back.data(), bulk.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    if (!std::isnan(bulk[h])) ASSERT_EQ(back[h], h) << h;
  }
  // The bulk rounding agrees with float_to_half's on values between halves, ties included.
  std::vector<float> between;
  for (uint32_t h = 0; h < 0x7bff; h += 7) {
    const float lo = half_to_float(static_cast<uint16_t>(h)), hi = half_to_float(static_cast<uint16_t>(h + 1));
    between.insert(between.end(), {lo + (hi - lo) / 4, (lo + hi) / 2, lo + 3 * (hi - lo) / 4, -(lo + hi) / 2});
  }
  std::vector<uint16_t> rounded(between.size());
  floats_to_halves(between.data(), rounded.data(), between.size());
  for (size_t i = 0; i < between.size(); ++i) ASSERT_EQ(rounded[i], float_to_half(between[i])) << between[i];
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 0x1p-11f)), 1.0f);                 // tie: to even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);   // tie: to even
  EXPECT_EQ(half_to_float(float_to_half(-11.512925f)), -11.515625f);
  EXPECT_EQ(half_to_float(float_to_half(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(65520.0f))));
  EXPECT_EQ(half_to_float(float_to_half(0x1p-24f)), 0x1p-24f);  // the smallest subnormal
  EXPECT_EQ(half_to_float(float_to_half(0x1p-26f)), 0.0f);
}

}  // namespace
}  // namespace sluice::cache
