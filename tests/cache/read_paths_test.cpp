// The three ways a shard's /mel is read (pread at each chunk's address from /mel_chunk_addresses,
// H5Dread_chunk when that table is absent, H5Dread when gzip is on) return the same exact values;
// a stale table is detected, and the fast checksum is bit-identical to HDF5's.
#include <hdf5.h>

#include <random>

#include "cache/cache_reader.h"
#include "cache/cache_verifier.h"
#include "cache/hdf5_handle.h"
#include "cache/shard_reader.h"
#include "common/error.h"
#include "cache_test_util.h"

extern "C" uint32_t H5_checksum_fletcher32(const void* data, size_t length);  // libhdf5

namespace sluice::cache {
namespace {

namespace fs = std::filesystem;

enum class Path { addressed, direct_chunk, hdf5_filter };

void drop_chunk_tables(const fs::path& dir) {
  for (const fs::path& shard : list_shard_files(dir)) {
    hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Ldelete(file, "mel_chunk_addresses", H5P_DEFAULT), 0);
    H5Fclose(file);
  }
}

class MelReadPaths : public ::testing::TestWithParam<Path> {};

TEST_P(MelReadPaths, ReturnExactlyWhatWasWritten) {
  testing::ScratchDir dir;
  const ShardWriterOptions options{32, GetParam() == Path::hdf5_filter ? 3 : 0};
  const auto samples = testing::build_cache(dir.path(), 2, 10, 16, "fp", options);
  if (GetParam() == Path::direct_chunk) drop_chunk_tables(dir.path());
  CacheReader reader = CacheReader::open(dir.path());
  for (int64_t i = 0; i < reader.size(); ++i) {
    EXPECT_EQ(reader.read(i).mel, samples[static_cast<size_t>(i)].mel) << i;
  }
  const std::vector<int64_t> indices = {19, 3, 4, 5, 6, 10, 9, 0};
  const std::vector<Sample> batch = reader.read_batch(indices);
  for (size_t k = 0; k < indices.size(); ++k) {
    EXPECT_EQ(batch[k].mel, samples[static_cast<size_t>(indices[k])].mel) << indices[k];
    EXPECT_EQ(batch[k].tokens, samples[static_cast<size_t>(indices[k])].tokens) << indices[k];
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, MelReadPaths,
                         ::testing::Values(Path::addressed, Path::direct_chunk, Path::hdf5_filter));

TEST(MelChunkAddresses, StaleTableIsNotUsedAndIsReported) {
  testing::ScratchDir dir;
  const auto samples = testing::build_cache(dir.path(), 1, 10, 16, "fp", ShardWriterOptions{32, 0});
  const fs::path shard = dir.path() / shard_file_name(0);
  {
    // Shift the table by one chunk, as if the chunks had moved.
    hid_t file = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t table = H5Dopen2(file, "mel_chunk_addresses", H5P_DEFAULT);
    hid_t space = H5Dget_space(table);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space, &n, nullptr);
    std::vector<uint64_t> addresses(n);
    H5Dread(table, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, addresses.data());
    std::rotate(addresses.begin(), addresses.begin() + 1, addresses.end());
    H5Dwrite(table, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, addresses.data());
    H5Sclose(space);
    H5Dclose(table);
    H5Fclose(file);
  }
  CacheReader reader = CacheReader::open(dir.path());
  for (int64_t i = 0; i < reader.size(); ++i) {
    EXPECT_EQ(reader.read(i).mel, samples[static_cast<size_t>(i)].mel) << i;
  }
  const VerifyResult result = verify_cache(dir.path());
  bool reported = false;
  for (const VerifyFault& fault : result.faults) {
    reported |= fault.problem.find("/mel_chunk_addresses[0]") != std::string::npos;
  }
  EXPECT_TRUE(reported) << result.to_text();
}

// A shard cut short after it was opened (the addressed path reads with pread): the read of a lost
// chunk fails naming the shard and what to run, where a mapped file gave the process SIGBUS.
TEST(MelChunkAddresses, ShardTruncatedAfterOpeningIsAnErrorNamingItNotSigbus) {
  testing::ScratchDir dir;
  const auto samples = testing::build_cache(dir.path(), 1, 10, 16, "fp", ShardWriterOptions{32, 0});
  const fs::path shard = dir.path() / shard_file_name(0);
  ShardReader reader(shard);
  std::vector<float> first(samples[0].mel.size());
  reader.read_mel(0, 1, first.data());
  EXPECT_EQ(first, samples[0].mel);
  fs::resize_file(shard, fs::file_size(shard) / 4);
  const int64_t last = reader.size() - 1;
  try {
    reader.read_mel_pieces(last, 1, [](const float*, int64_t) {});
    FAIL() << "a chunk past the new end of the file was read";
  } catch (const CacheError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(shard.string()), std::string::npos) << message;
    EXPECT_NE(message.find("truncated or changed after it was opened"), std::string::npos) << message;
    EXPECT_NE(message.find("sluice cache verify " + dir.path().string()), std::string::npos) << message;
  }
  // A new reader of the cache names the shard at once: its size is not the manifest's.
  try {
    (void)CacheReader::open(dir.path());
    FAIL() << "a truncated shard was accepted";
  } catch (const CacheError& error) {
    EXPECT_NE(std::string(error.what()).find("shard-00000.h5 has "), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("truncated"), std::string::npos) << error.what();
  }
}

TEST(Fletcher32, BitIdenticalToHdf5) {
  std::mt19937 random(7);
  for (size_t length = 0; length < 2100; ++length) {
    std::vector<uint8_t> data(length);
    for (uint8_t& byte : data) byte = static_cast<uint8_t>(random());
    if (length % 5 == 0) std::fill(data.begin(), data.end(), 0xff);  // the folding corner case
    ASSERT_EQ(h5::fletcher32(data.data(), length), H5_checksum_fletcher32(data.data(), length))
        << "length " << length;
  }
  std::vector<uint8_t> chunk(128 * 80 * 4);
  for (uint8_t& byte : chunk) byte = static_cast<uint8_t>(random());
  EXPECT_EQ(h5::fletcher32(chunk.data(), chunk.size()),
            H5_checksum_fletcher32(chunk.data(), chunk.size()));
}

}  // namespace
}  // namespace sluice::cache
