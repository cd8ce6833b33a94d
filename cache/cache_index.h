#pragma once
// CACHE_DIR/index.h5: one row per sample over the whole cache, in cache order (shards ascending,
// rows ascending), built FROM the shards, which stay the single source of truth. The prep job
// calls write_index() once, after every rank has committed its shards, then write_manifest().
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/manifest.h"
#include "cache/mel_statistics.h"

namespace sluice::cache {

// What building the index learnt about the shards: all a manifest needs besides the caller's
// settings and vocabulary.
struct IndexSummary {
  std::string fingerprint;             // common to every shard
  int64_t n_mels = 0;                  // common to every shard
  std::vector<std::string> languages;  // sorted; codes in the index
  std::vector<std::string> speakers;   // sorted; codes in the index
  std::vector<ManifestShard> shards;
  ManifestTotals totals;
  std::string index_file = "index.h5";
  // Every shard's /rejects lines, in shard order: what rejects.jsonl is rebuilt from, collected
  // while the shards are open anyway.
  std::vector<std::string> reject_lines;
  // Per-bin statistics from the sum of every shard's /mel_sum and /mel_sum_sq; nullopt when any
  // shard predates them (its sums are unknown, so no correct total exists).
  std::optional<MelStatistics> mel_statistics;
};

// The columns of index.h5, row i = sample i in cache order.
struct IndexColumns {
  std::string fingerprint;
  int64_t n_mels = 0;
  std::vector<std::string> ids;
  std::vector<uint32_t> shard, row;
  std::vector<int32_t> n_frames, n_tokens;
  std::vector<float> seconds;
  std::vector<uint16_t> language;
  std::vector<uint32_t> speaker;
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
};

// The shard files in dir ("shard-NNNNN.h5" exactly; temporaries and other files are ignored),
// sorted by shard number.
std::vector<std::filesystem::path> list_shard_files(const std::filesystem::path& dir);

// Reads every shard's small columns (and its per-bin mel sums) and writes dir/index.h5
// atomically. shard_files must be in dir, in ascending shard number, and agree on fingerprint and
// n_mels (else CacheError naming the shard). Returns the statistics for the manifest. Shards
// written by any prep rank are read here, so rank 0 alone can sum the whole cache.
IndexSummary write_index(const std::filesystem::path& dir,
                         const std::vector<std::filesystem::path>& shard_files);

// Reads an index file; CacheError naming the file on any failure (a bad checksum included).
IndexColumns read_index(const std::filesystem::path& index_file);

// The manifest for an index just written (written last, atomically): the cache is complete.
Manifest write_manifest(const std::filesystem::path& dir, IndexSummary summary,
                        const nlohmann::json& settings, const nlohmann::json& vocabulary);

// Removes an old manifest, then write_index(), then write_manifest(): the last step for a caller
// that has nothing to decide between the index and the manifest.
Manifest finalize_cache(const std::filesystem::path& dir,
                        const std::vector<std::filesystem::path>& shard_files,
                        const nlohmann::json& settings, const nlohmann::json& vocabulary);

}  // namespace sluice::cache
