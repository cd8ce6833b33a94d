#pragma once
// Per-mel-bin statistics of a cache's log-mel frames, for normalising features at train time:
// x' = (x - mean[b]) / stddev[b] for mel bin b.
//
// Where they live (docs/cache-format.md): every shard stores the sums of its own frames
// (/mel_sum, /mel_sum_sq, float64 [n_mels]; the frame count is its /mel length), accumulated by
// ShardWriter as frames are appended. write_index() adds the shards' sums and write_manifest()
// records the result as manifest.json's "mel_statistics". So the shards stay the single source of
// truth, each prep rank only ever sums its own frames, and `sluice cache verify` can recompute
// everything from the shards. Caches written before these statistics existed have neither the
// datasets nor the manifest key (same format_version 1): CacheReader::mel_statistics() is then
// null.
#include <cstdint>
#include <vector>

namespace sluice::cache {

// What training normalises with.
struct MelStatistics {
  int64_t frames = 0;               // the number of frames the statistics are over
  std::vector<float> mean, stddev;  // [n_mels]; stddev is the population standard deviation
};

// Running per-bin sums over frames. Double precision: a cache holds millions of frames, a float
// sum of them keeps ~3 significant digits, and E[x^2] - E[x]^2 cancels badly in float.
struct MelSums {
  int64_t frames = 0;
  std::vector<double> sum, sum_sq;  // [n_mels]

  MelSums() = default;
  explicit MelSums(int64_t n_mels);
  int64_t n_mels() const { return static_cast<int64_t>(sum.size()); }

  // Adds n_frames frames (n_frames x n_mels floats, row-major) frame by frame, in order. The same
  // frames added in the same order give bit-identical sums: verify relies on that when it
  // recomputes a shard's sums from its /mel.
  void add_frames(const float* data, int64_t n_frames);
  // Adds the sums of other frames (another shard). Throws CacheError when n_mels differ.
  void add(const MelSums& other);
  // mean = sum / frames and stddev = sqrt(max(sum_sq / frames - mean^2, 0)), computed in double
  // and rounded to float once. With no frames, every mean and stddev is 0.
  MelStatistics statistics() const;
};

}  // namespace sluice::cache
