#pragma once
// Reads one cache shard (docs/cache-format.md). Opening checks the format attributes and loads the
// two offset columns (n+1 int64 each); everything else is read on demand.
//
// Errors are CacheError naming the file and the object; a chunk whose fletcher32 checksum does not
// match fails the read that touches it. Thread-safety: as ShardWriter (HDF5 calls serialised
// process-wide); a ShardReader itself is not synchronised beyond that.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/mel_statistics.h"

namespace sluice::cache {

// The shard's root attributes.
struct ShardInfo {
  std::filesystem::path path;
  int64_t format_version = 0;
  std::string fingerprint;
  int64_t shard = -1;  // global shard number
  int64_t n_mels = 0;
  std::string strings_xxh64;
};

// Everything stored for one row.
struct ShardRow {
  std::string id, text, language, speaker;
  double seconds = 0.0;
  int64_t n_frames = 0;
  std::vector<float> mel;  // n_frames x n_mels, row-major
  std::vector<int32_t> tokens;
};

// The small per-row columns (what the index is built from), plus the shard's reject lines.
struct ShardColumns {
  std::vector<std::string> ids, languages, speakers;
  std::vector<int32_t> n_frames, n_tokens;
  std::vector<double> seconds;
  std::vector<std::string> rejects;
};

class ShardReader {
 public:
  // Opens read-only and checks format == "sluice-shard", format_version == 1 and the offsets.
  // chunk_cache_bytes sets HDF5's chunk cache for /mel (< 0: HDF5's default, 1 MiB).
  explicit ShardReader(std::filesystem::path path, int64_t chunk_cache_bytes = -1);
  ShardReader(ShardReader&&) noexcept;
  ShardReader& operator=(ShardReader&&) noexcept;
  ~ShardReader();

  const ShardInfo& info() const;
  int64_t size() const;  // rows
  // Row r's frames are [mel_offsets()[r], mel_offsets()[r+1]) of /mel; tokens likewise.
  const std::vector<int64_t>& mel_offsets() const;
  const std::vector<int64_t>& token_offsets() const;

  ShardRow read(int64_t row) const;
  // The mel frames (resp. tokens) of rows [first, first + count), concatenated in row order into
  // out, which must hold (mel_offsets()[first+count] - mel_offsets()[first]) * n_mels floats
  // (resp. the token count). One hyperslab read: the cheap way to read adjacent rows.
  void read_mel(int64_t first, int64_t count, float* out) const;
  // The same frames, passed to consume(frames, n_frames) in order and in pieces (at most one chunk
  // each); `frames` is valid only during the call. The way to fill buffers of one's own without
  // an intermediate copy. With /mel filtered by fletcher32 alone (gzip_level 0, the default) the
  // shard is memory-mapped and each chunk taken at its address from /mel_chunk_addresses (or read
  // with H5Dread_chunk when that table is absent), and its checksum verified here exactly as
  // HDF5's filter would: several times faster than H5Dread (docs/cache-format.md). Otherwise
  // (gzip) this goes through H5Dread.
  void read_mel_pieces(int64_t first, int64_t count,
                       const std::function<void(const float*, int64_t)>& consume) const;
  void read_tokens(int64_t first, int64_t count, int32_t* out) const;

  // The per-bin sums over all of the shard's frames (/mel_sum, /mel_sum_sq; frames = the length
  // of /mel). nullopt for a shard written before these datasets existed (it has neither);
  // CacheError when only one is there or either is not n_mels long (a damaged shard).
  std::optional<MelSums> read_mel_sums() const;

  ShardColumns read_columns() const;
  std::vector<std::string> read_texts() const;
  // Every token of the shard (for vocabulary statistics).
  std::vector<int32_t> read_all_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// For resume: true when path names a shard file ("shard-NNNNN.h5", not a temporary) that opens,
// has format "sluice-shard" version 1, a shard attribute equal to NNNNN, the expected
// fingerprint, and /mel_sum and /mel_sum_sq (a shard written before per-bin statistics is
// rewritten, so that re-running prep gives the cache its statistics). False on any error (which
// is logged at debug level).
bool is_complete_shard(const std::filesystem::path& path, const std::string& expected_fingerprint);

// "shard-00042.h5" for 42.
std::string shard_file_name(int64_t shard_number);
// 42 for ".../shard-00042.h5"; -1 when the name is not exactly a shard file name.
int64_t parse_shard_file_name(const std::filesystem::path& path);

}  // namespace sluice::cache
