// ShardWriter / ShardReader: exact round trips, atomicity (nothing at the final name unless
// committed), and what is_complete_shard accepts on resume.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "cache/cache_index.h"
#include "cache/shard_reader.h"
#include "cache/shard_writer.h"
#include "cache_test_util.h"
#include "common/error.h"

namespace sluice::cache {
namespace {

using testing::ScratchDir;
using testing::TestSample;
namespace fs = std::filesystem;

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

struct RoundTripCase {
  int chunk_frames;
  int gzip_level;
  int n_mels;
};

class ShardRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(ShardRoundTrip, ReadsBackExactlyWhatWasWritten) {
  const RoundTripCase param = GetParam();
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(7);
  const std::vector<TestSample> samples =
      testing::make_samples(41, param.n_mels, 1234 + param.chunk_frames, "rt", 1, 700);
  std::vector<TestSample> written = samples;
  written[3].tokens.clear();  // a sample without tokens is legal
  written[4].mel.clear();     // and one without frames
  written[4].n_frames = 0;
  const std::vector<std::string> rejects = {R"({"id":"x1","reason":"too_long"})",
                                            R"({"id":"x2","reason":"empty_text"})"};
  testing::write_shard(path, 7, param.n_mels, "fp-1", written, rejects,
                       ShardWriterOptions{param.chunk_frames, param.gzip_level});
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"shard-00007.h5"});

  ShardReader reader(path);
  EXPECT_EQ(reader.size(), 41);
  EXPECT_EQ(reader.info().fingerprint, "fp-1");
  EXPECT_EQ(reader.info().shard, 7);
  EXPECT_EQ(reader.info().n_mels, param.n_mels);
  EXPECT_EQ(reader.info().format_version, 1);
  EXPECT_EQ(reader.info().strings_xxh64.size(), 16u);
  int64_t total_frames = 0;
  for (size_t i = 0; i < written.size(); ++i) {
    const TestSample& expected = written[i];
    ShardRow row = reader.read(static_cast<int64_t>(i));
    EXPECT_EQ(row.id, expected.id);
    EXPECT_EQ(row.text, expected.text);
    EXPECT_EQ(row.language, expected.language);
    EXPECT_EQ(row.speaker, expected.speaker);
    EXPECT_EQ(row.seconds, expected.seconds);
    EXPECT_EQ(row.n_frames, expected.n_frames);
    ASSERT_EQ(row.mel, expected.mel) << "row " << i;  // exact floats
    EXPECT_EQ(row.tokens, expected.tokens);
    EXPECT_EQ(reader.mel_offsets()[i], total_frames);
    total_frames += expected.n_frames;
  }
  EXPECT_EQ(reader.mel_offsets().back(), total_frames);

  // Adjacent rows in one read: the concatenation of their frames.
  const int64_t first = 5, count = 9;
  std::vector<float> block(static_cast<size_t>(
      (reader.mel_offsets()[first + count] - reader.mel_offsets()[first]) * param.n_mels));
  reader.read_mel(first, count, block.data());
  std::vector<float> expected_block;
  for (int64_t r = first; r < first + count; ++r) {
    expected_block.insert(expected_block.end(), written[r].mel.begin(), written[r].mel.end());
  }
  EXPECT_EQ(block, expected_block);

  ShardColumns columns = reader.read_columns();
  ASSERT_EQ(columns.ids.size(), 41u);
  EXPECT_EQ(columns.ids[40], written[40].id);
  EXPECT_EQ(columns.n_frames[12], written[12].n_frames);
  EXPECT_EQ(columns.n_tokens[3], 0);
  EXPECT_EQ(columns.seconds[9], written[9].seconds);
  EXPECT_EQ(columns.speakers[2], written[2].speaker);
  EXPECT_EQ(columns.rejects, rejects);
  EXPECT_EQ(reader.read_texts()[1], written[1].text);
}

INSTANTIATE_TEST_SUITE_P(ChunkAndCompression, ShardRoundTrip,
                         ::testing::Values(RoundTripCase{128, 0, 80}, RoundTripCase{7, 0, 80},
                                           RoundTripCase{64, 4, 13}, RoundTripCase{1000, 0, 1}));

TEST(ShardWriter, EmptyShardHoldsOnlyRejects) {
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(0);
  testing::write_shard(path, 0, 80, "fp", {}, {R"({"id":"a","reason":"missing_audio"})"});
  ShardReader reader(path);
  EXPECT_EQ(reader.size(), 0);
  EXPECT_EQ(reader.mel_offsets(), std::vector<int64_t>{0});
  EXPECT_EQ(reader.read_columns().rejects.size(), 1u);
  EXPECT_TRUE(is_complete_shard(path, "fp"));
}

TEST(ShardWriter, UncommittedWriterLeavesNoFile) {
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(3);
  const auto samples = testing::make_samples(5, 80, 9);
  {
    ShardWriter writer(path, 3, 80, "fp");
    for (const auto& s : samples) writer.append(s.view());
    EXPECT_TRUE(fs::exists(writer.temporary_path()));
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(ShardWriter, KilledWriterLeavesNothingAtTheFinalName) {
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(4);
  const auto samples = testing::make_samples(30, 80, 11);
  // A child process appends (so the temporary holds data) and is killed before commit.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ShardWriter writer(path, 4, 80, "fp", ShardWriterOptions{16, 0});
    for (const auto& s : samples) writer.append(s.view());
    raise(SIGKILL);
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(path));
  std::vector<std::string> left = files_in(dir.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind("shard-00004.h5.tmp-", 0), 0u) << left[0];
  EXPECT_FALSE(is_complete_shard(path, "fp"));
  EXPECT_FALSE(is_complete_shard(dir.path() / left[0], "fp"));
  EXPECT_TRUE(list_shard_files(dir.path()).empty());
  EXPECT_EQ(remove_shard_temporaries(dir.path()), 1);
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(ShardWriter, CompleteTemporaryIsStillNotAShard) {
  // Even a temporary whose contents are complete (killed between close and rename) is never
  // taken for a shard: only the final name counts.
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(2);
  testing::write_shard(path, 2, 8, "fp", testing::make_samples(3, 8, 5));
  const fs::path temporary = path.string() + ".tmp-otherhost-4242";
  fs::rename(path, temporary);
  EXPECT_FALSE(is_complete_shard(temporary, "fp"));
  EXPECT_FALSE(is_complete_shard(path, "fp"));
  EXPECT_TRUE(list_shard_files(dir.path()).empty());
}

TEST(IsCompleteShard, ChecksNameFormatNumberAndFingerprint) {
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(1);
  testing::write_shard(path, 1, 8, "fp-a", testing::make_samples(2, 8, 5));
  EXPECT_TRUE(is_complete_shard(path, "fp-a"));
  EXPECT_FALSE(is_complete_shard(path, "fp-b"));                             // stale settings
  EXPECT_FALSE(is_complete_shard(dir.path() / shard_file_name(9), "fp-a"));  // missing
  const fs::path renamed = dir.path() / shard_file_name(2);
  fs::copy_file(path, renamed);
  EXPECT_FALSE(is_complete_shard(renamed, "fp-a"));  // shard attribute says 1
  const fs::path garbage = dir.path() / shard_file_name(3);
  std::ofstream(garbage) << "not an HDF5 file";
  EXPECT_FALSE(is_complete_shard(garbage, "fp-a"));
  // A truncated copy of a real shard.
  const fs::path truncated = dir.path() / shard_file_name(5);
  fs::copy_file(path, truncated);
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  EXPECT_FALSE(is_complete_shard(truncated, "fp-a"));
}

TEST(ShardFileName, FormatsAndParses) {
  EXPECT_EQ(shard_file_name(42), "shard-00042.h5");
  EXPECT_EQ(parse_shard_file_name("/x/shard-00042.h5"), 42);
  EXPECT_EQ(parse_shard_file_name("shard-123456.h5"), 123456);
  EXPECT_EQ(parse_shard_file_name("shard-042.h5"), -1);
  EXPECT_EQ(parse_shard_file_name("shard-00042.h5.tmp-host-1"), -1);
  EXPECT_EQ(parse_shard_file_name("index.h5"), -1);
}

TEST(ShardWriter, RejectsMalformedInput) {
  ScratchDir dir;
  const fs::path path = dir.path() / shard_file_name(0);
  EXPECT_THROW(ShardWriter(path, 0, 0, "fp"), CacheError);
  EXPECT_THROW(ShardWriter(path, 0, 80, "fp", ShardWriterOptions{0, 0}), CacheError);
  EXPECT_THROW(ShardWriter(path, 0, 80, "fp", ShardWriterOptions{128, 10}), CacheError);
  EXPECT_THROW(ShardWriter(dir.path() / "no-such-dir" / "shard-00000.h5", 0, 80, "fp"), CacheError);
  ShardWriter writer(path, 0, 80, "fp");
  auto samples = testing::make_samples(1, 80, 3);
  ShardSample sample = samples[0].view();
  sample.id = "";
  EXPECT_THROW(writer.append(sample), CacheError);
  sample.id = std::string("a\0b", 3);
  EXPECT_THROW(writer.append(sample), CacheError);
  sample = samples[0].view();
  sample.mel = nullptr;
  EXPECT_THROW(writer.append(sample), CacheError);
  EXPECT_THROW(writer.add_reject("two\nlines"), CacheError);
  writer.append(samples[0].view());
  writer.commit();
  EXPECT_THROW(writer.append(samples[0].view()), CacheError);
  EXPECT_THROW(writer.commit(), CacheError);
  EXPECT_EQ(ShardReader(path).size(), 1);
}

TEST(ShardReader, NonShardFilesErrorWithTheirPath) {
  ScratchDir dir;
  const fs::path garbage = dir.path() / "shard-00000.h5";
  std::ofstream(garbage) << "junk";
  try {
    ShardReader reader(garbage);
    FAIL() << "expected CacheError";
  } catch (const CacheError& error) {
    EXPECT_NE(std::string(error.what()).find(garbage.string()), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("H5Fopen"), std::string::npos) << error.what();
  }
  EXPECT_THROW(ShardReader(dir.path() / "missing.h5"), CacheError);
}

}  // namespace
}  // namespace sluice::cache
