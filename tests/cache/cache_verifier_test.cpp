// verify_cache finds damage and names the file and the sample: bytes flipped inside a /mel chunk
// (fletcher32), inside the string heap (strings_xxh64), in the index, plus shards that are missing
// or from another prep run. The reader reports the same damage on read.
#include "cache/cache_verifier.h"

#include <hdf5.h>

#include <fstream>
#include <iterator>

#include "cache/cache_index.h"
#include "cache/cache_reader.h"
#include "cache_test_util.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using testing::TestSample;

struct ChunkLocation {
  hsize_t first_row = 0;  // first dataset row in the chunk
  hsize_t rows = 0;       // chunk rows
  haddr_t address = 0;    // byte offset of the stored chunk in the file
  hsize_t bytes = 0;      // stored size (data + 4-byte fletcher32 checksum)
};

// The stored chunk of `dataset` that holds dataset row `row` (H5Dget_chunk_info).
ChunkLocation chunk_holding(const fs::path& file, const char* dataset, hsize_t row) {
  ChunkLocation found;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  hid_t create = H5Dget_create_plist(d);
  hsize_t chunk[2] = {0, 0};
  H5Pget_chunk(create, 2, chunk);
  hsize_t n = 0;
  H5Dget_num_chunks(d, space, &n);
  for (hsize_t i = 0; i < n; ++i) {
    hsize_t coords[2] = {0, 0};
    unsigned mask = 0;
    haddr_t address = 0;
    hsize_t size = 0;
    H5Dget_chunk_info(d, space, i, coords, &mask, &address, &size);
    if (coords[0] <= row && row < coords[0] + chunk[0])
      found = {coords[0], chunk[0], address, size};
  }
  H5Pclose(create);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  EXPECT_GT(found.bytes, 4u) << "no chunk of " << dataset << " holds row " << row;
  return found;
}

void flip_bytes(const fs::path& file, uint64_t offset, int count) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  for (int i = 0; i < count; ++i) {
    io.seekg(static_cast<std::streamoff>(offset + i));
    char byte = 0;
    io.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    io.seekp(static_cast<std::streamoff>(offset + i));
    io.write(&byte, 1);
  }
}

std::string faults_text(const VerifyResult& result) { return result.to_text(); }

class CacheVerifier : public ::testing::Test {
 protected:
  void SetUp() override {
    samples_ = testing::build_cache(dir_.path(), 3, 12, 16, "fp-verify", ShardWriterOptions{32, 0});
  }
  // Row range (in shard rows) of shard `shard` whose frames intersect [first, first + count).
  std::pair<int64_t, int64_t> rows_touching(int shard, hsize_t first, hsize_t count) const {
    int64_t offset = 0, lo = -1, hi = -1;
    for (int row = 0; row < 12; ++row) {
      const int64_t frames = samples_[static_cast<size_t>(shard * 12 + row)].n_frames;
      if (offset < static_cast<int64_t>(first + count) &&
          offset + frames > static_cast<int64_t>(first)) {
        if (lo < 0) lo = row;
        hi = row;
      }
      offset += frames;
    }
    return {lo, hi};
  }
  int64_t first_frame_of(int shard, int row) const {
    int64_t offset = 0;
    for (int r = 0; r < row; ++r) offset += samples_[static_cast<size_t>(shard * 12 + r)].n_frames;
    return offset;
  }

  ScratchDir dir_;
  std::vector<TestSample> samples_;
};

TEST_F(CacheVerifier, CleanCacheIsOk) {
  const VerifyResult result = verify_cache(dir_.path());
  EXPECT_TRUE(result.ok()) << faults_text(result);
  EXPECT_EQ(result.shards_checked, 3);
  EXPECT_EQ(result.samples_checked, 36);
  int64_t frames = 0;
  for (const auto& s : samples_) frames += s.n_frames;
  // Every /mel chunk at least: ceil(frames per shard / 32) each.
  EXPECT_GT(result.chunks_checked, frames / 32);
  EXPECT_GE(result.bytes_checked, frames * 16 * 4);
  EXPECT_TRUE(result.notes.empty());
  EXPECT_EQ(result.to_json()["ok"], true);
}

// cache.mel_dtype: a float16 cache verifies clean; a manifest that says float16 over float32
// shards is a fault per shard naming the version and the type.
TEST(CacheVerifierFloat16, TheShardsMustHoldWhatTheManifestsMelDtypeSays) {
  ScratchDir half;
  testing::build_cache(half.path(), 2, 6, 8, "fp-half", ShardWriterOptions{32, 0, true});
  const VerifyResult clean = verify_cache(half.path());
  EXPECT_TRUE(clean.ok()) << clean.to_text();
  EXPECT_EQ(Manifest::read(half.path()).mel_dtype, "float16");
  EXPECT_EQ(Manifest::read(half.path()).format_version, 2);

  ScratchDir full;
  testing::build_cache(full.path(), 2, 6, 8, "fp-full", ShardWriterOptions{32, 0});
  nlohmann::json manifest = Manifest::read(full.path()).to_json();
  manifest["format_version"] = 2;
  manifest["mel_dtype"] = "float16";
  std::ofstream(full.path() / "manifest.json") << manifest.dump();
  const VerifyResult wrong = verify_cache(full.path());
  EXPECT_FALSE(wrong.ok());
  const std::string text = wrong.to_text();
  EXPECT_NE(text.find("expected 'sluice-shard' version 2"), std::string::npos) << text;
  EXPECT_NE(text.find("/mel is not stored as IEEE float16"), std::string::npos) << text;
}

TEST_F(CacheVerifier, FlippedBytesInAMelChunkNameTheShardAndSample) {
  const fs::path shard = dir_.path() / shard_file_name(1);
  const int target_row = 5;
  const ChunkLocation chunk = chunk_holding(shard, "/mel", first_frame_of(1, target_row));
  // Middle of the chunk's data (the last 4 bytes are the checksum itself).
  flip_bytes(shard, chunk.address + chunk.bytes / 2, 3);
  const auto [first_row, last_row] = rows_touching(1, chunk.first_row, chunk.rows);
  ASSERT_LE(first_row, target_row);

  const VerifyResult result = verify_cache(dir_.path());
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.faults.size(), 1u) << faults_text(result);
  const VerifyFault& fault = result.faults[0];
  EXPECT_EQ(fault.file, "shard-00001.h5");
  EXPECT_EQ(fault.row, first_row);
  EXPECT_EQ(fault.sample_id, samples_[static_cast<size_t>(12 + first_row)].id);
  EXPECT_NE(fault.problem.find("/mel elements " + std::to_string(chunk.first_row)),
            std::string::npos)
      << fault.problem;
  EXPECT_NE(fault.problem.find("Fletcher32"), std::string::npos) << fault.problem;
  EXPECT_NE(result.to_text().find("DAMAGED"), std::string::npos);

  // The reader refuses the damaged sample and says what to do; the others still read.
  CacheReader reader = CacheReader::open(dir_.path());
  const TestSample& damaged = samples_[static_cast<size_t>(12 + target_row)];
  try {
    reader.read(12 + target_row);
    FAIL() << "expected CacheError";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'" + damaged.id + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("shard-00001.h5 row " + std::to_string(target_row)), std::string::npos)
        << message;
    EXPECT_NE(message.find("sluice cache verify"), std::string::npos) << message;
    EXPECT_NE(message.find("Fletcher32"), std::string::npos) << message;
  }
  // In a coalesced batch (one run of adjacent rows), the error names the first damaged sample.
  std::vector<int64_t> run = {0};
  for (int64_t r = target_row + 1; r >= first_row; --r) run.push_back(12 + r);
  try {
    reader.read_batch(run);
    FAIL() << "expected CacheError";
  } catch (const CacheError& error) {
    const std::string expected_id = samples_[static_cast<size_t>(12 + first_row)].id;
    EXPECT_NE(std::string(error.what()).find("'" + expected_id + "'"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(reader.read(0).mel, samples_[0].mel);
  EXPECT_EQ(reader.read(35).mel, samples_[35].mel);
}

TEST_F(CacheVerifier, ChangedTextIsCaughtByTheStringsDigest) {
  const fs::path shard = dir_.path() / shard_file_name(2);
  const std::string text = samples_[24 + 3].text;
  std::ifstream in(shard, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(text);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find(text, at + 1), std::string::npos);
  flip_bytes(shard, at + text.size() - 1, 1);  // the last character ("#3" -> "#i")

  const VerifyResult result = verify_cache(dir_.path());
  ASSERT_EQ(result.faults.size(), 1u) << faults_text(result);
  EXPECT_EQ(result.faults[0].file, "shard-00002.h5");
  EXPECT_NE(result.faults[0].problem.find("strings_xxh64"), std::string::npos)
      << result.faults[0].problem;
}

TEST_F(CacheVerifier, DamagedIndexChunkIsReported) {
  const fs::path index = dir_.path() / "index.h5";
  const ChunkLocation chunk = chunk_holding(index, "/n_frames", 0);
  flip_bytes(index, chunk.address + 8, 2);
  const VerifyResult result = verify_cache(dir_.path());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.faults[0].file, "index.h5");
  EXPECT_NE(result.faults[0].problem.find("/n_frames"), std::string::npos)
      << result.faults[0].problem;
  EXPECT_THROW(CacheReader::open(dir_.path()), CacheError);
}

TEST_F(CacheVerifier, ShardFromAnotherPrepRunIsReported) {
  std::vector<TestSample> same(samples_.begin() + 12, samples_.begin() + 24);
  testing::write_shard(dir_.path() / shard_file_name(1), 1, 16, "fp-stale", same,
                       {R"({"id":"bad-1","reason":"too_short"})"}, ShardWriterOptions{32, 0});
  const VerifyResult result = verify_cache(dir_.path());
  ASSERT_FALSE(result.ok());
  bool named = false;
  for (const VerifyFault& fault : result.faults) {
    EXPECT_EQ(fault.file, "shard-00001.h5");
    named |= fault.problem.find("fingerprint fp-stale differs") != std::string::npos;
  }
  EXPECT_TRUE(named) << faults_text(result);
}

TEST_F(CacheVerifier, MissingShardAndLeftoversAreReported) {
  fs::rename(dir_.path() / shard_file_name(2), dir_.path() / (shard_file_name(2) + ".tmp-h-1"));
  const VerifyResult result = verify_cache(dir_.path());
  ASSERT_EQ(result.faults.size(), 1u) << faults_text(result);
  EXPECT_EQ(result.faults[0].file, "shard-00002.h5");
  EXPECT_NE(result.faults[0].problem.find("missing"), std::string::npos);
  ASSERT_EQ(result.notes.size(), 1u);
  EXPECT_NE(result.notes[0].find(".tmp-h-1"), std::string::npos);
}

TEST(CacheVerifierNoCache, MissingManifestIsAFault) {
  ScratchDir dir;
  const VerifyResult result = verify_cache(dir.path());
  ASSERT_EQ(result.faults.size(), 1u);
  EXPECT_EQ(result.faults[0].file, "manifest.json");
  const VerifyResult none = verify_cache(dir.path() / "nope");
  EXPECT_FALSE(none.ok());
}

}  // namespace
}  // namespace sluice::cache
