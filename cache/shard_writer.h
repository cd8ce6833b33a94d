#pragma once
// Writes one cache shard (docs/cache-format.md): the features and texts of a contiguous range of
// samples, as one HDF5 file that h5py reads with no sluice code.
//
// Atomicity: everything goes to a temporary file next to the final one ("<final>.tmp-<host>-<pid>")
// which is renamed to the final name only after it is complete, closed and fsync'd (and the
// directory is fsync'd after the rename). A process killed at any moment therefore leaves either no
// file at the final name or a complete shard; never a half one. A leftover temporary is not a shard
// (is_complete_shard rejects its name); remove_shard_temporaries() clears them.
//
// Memory: mel frames are streamed into the file in whole chunks as they are appended; the writer
// holds at most one partial chunk of frames (chunk_frames x n_mels floats) plus the small columns
// (tokens, offsets, strings, seconds, rejects) of the shard, which are written at commit(). For a
// 1000-sample shard that is ~1 MB, whatever the audio length. commit() also records where each
// /mel chunk landed (/mel_chunk_addresses, for fast reads; ~40-80 ms per 1000-sample shard).
//
// Statistics: append() adds each frame to per-bin sums (double precision) and commit() writes
// them as /mel_sum and /mel_sum_sq, so the cache's per-bin mean and std (manifest.json's
// "mel_statistics", see mel_statistics.h) are built from the shards without reading /mel again.
//
// Thread-safety: a writer is used by one thread. HDF5 calls are serialised process-wide (see
// cache_reader.h), so writers and readers on other threads are safe, but do not run in parallel.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace sluice::cache {

// One sample to append. The writer copies what it needs before append() returns.
struct ShardSample {
  std::string id;              // unique in the cache; no NUL bytes (as every string here)
  std::string text;            // the text the tokens came from, UTF-8
  std::string language;        // e.g. "en"; becomes a code in the index
  std::string speaker;         // becomes a code in the index
  const float* mel = nullptr;  // n_frames x n_mels, row-major (frame-major); all finite
  int64_t n_frames = 0;
  const int32_t* tokens = nullptr;
  int64_t n_tokens = 0;
  double seconds = 0.0;  // audio duration
};

struct ShardWriterOptions {
  // Rows of /mel per chunk, the unit of checksumming. 128 frames x 80 mels x 4 bytes = 40 KiB: a
  // sample of F frames overlaps ~F/128 + 1 chunks, so reading a typical TTS sample (100-900
  // frames, mean ~570) checks ~1.2x the bytes it returns (256: ~1.45x; 64: ~1.1x but twice the
  // chunks to index and, at write and verify time, O(chunks^2) lookups per shard in HDF5 1.10).
  // Measured read throughput of 64/128/256 was within noise (docs/cache-format.md).
  int chunk_frames = 128;
  // Deflate level 0-9 for every dataset; 0 = off (mels compress poorly and reads cost CPU).
  int gzip_level = 0;
  // /mel as IEEE float16 (cache.mel_dtype: float16; the shard's format_version 2): half the
  // bytes. Each value is rounded to nearest (relative error <= 2^-11) before anything else sees
  // it, so /mel_sum and /mel_sum_sq describe the stored values; a value past float16's range
  // (|x| > 65504) is a CacheError.
  bool float16_mels = false;

  // Bytes of one stored /mel value.
  int mel_value_bytes() const { return float16_mels ? 2 : 4; }
};

class ShardWriter {
 public:
  // Creates the temporary file now (throws CacheError if it cannot). final_path's directory must
  // exist; an existing file at final_path is replaced by commit().
  ShardWriter(std::filesystem::path final_path, int shard_number, int n_mels,
              std::string fingerprint, ShardWriterOptions options = {});
  ShardWriter(ShardWriter&&) noexcept;
  ShardWriter& operator=(ShardWriter&&) noexcept;
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // Without a successful commit(): closes and removes the temporary file (logged, never throws).
  ~ShardWriter();

  // Appends one sample as the next row. Throws CacheError on a malformed sample (empty id, NUL in
  // a string, null data with a nonzero length, a NaN or infinite mel value: nothing of it is then
  // written) or an I/O failure; after commit() it throws.
  void append(const ShardSample& sample);
  // Records one input of this shard's range that was skipped: one JSON line (no newline), stored
  // in /rejects. The prep job also writes it to rejects.jsonl.
  void add_reject(const std::string& json_line);

  // Writes the remaining data and attributes, closes and fsyncs the file and renames it to the
  // final name. Throws CacheError on failure (the temporary is then removed by the destructor).
  void commit();

  int64_t size() const;  // samples appended so far
  const std::filesystem::path& final_path() const;
  const std::filesystem::path& temporary_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Removes "<dir>/shard-*.h5.tmp-*" files left by killed writers; returns how many. Call only when
// no writer is running on dir (e.g. when the prep job starts, before its ranks begin writing).
int remove_shard_temporaries(const std::filesystem::path& dir);

}  // namespace sluice::cache
