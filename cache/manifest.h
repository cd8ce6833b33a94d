#pragma once
// CACHE_DIR/manifest.json (docs/cache-format.md): what a cache holds and how it was made. Written
// last by the prep job (write_manifest in cache_index.h), so a manifest's presence means the
// cache is complete. Pure JSON: no HDF5 here.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/mel_statistics.h"

namespace sluice::cache {

struct ManifestShard {
  std::string file;   // "shard-00000.h5", relative to the cache directory
  int64_t shard = 0;  // global shard number (also in the file name)
  int64_t samples = 0, frames = 0, tokens = 0, rejects = 0;
  double seconds = 0.0;
  int64_t bytes = 0;  // file size when the index was built
};

struct ManifestTotals {
  int64_t samples = 0, frames = 0, tokens = 0, rejects = 0;
  double seconds = 0.0;

  // {"samples", "frames", "tokens", "seconds", "rejects"}: as in the manifest and inspect --json.
  nlohmann::json to_json() const;
};

struct Manifest {
  static constexpr const char* format_name = "sluice-cache";
  // 1: float32 mels; 2: the same layout with mel_dtype (float16 mels: shard format_version 2).
  // A float32 cache is still written as version 1, so older sluice reads it.
  static constexpr int64_t current_format_version = 2;
  static constexpr const char* file_name = "manifest.json";

  int64_t format_version = 1;          // 2 when mel_dtype is float16
  std::string mel_dtype = "float32";   // "float32" or "float16": how the shards store /mel
  std::string fingerprint;
  std::string created;                 // ISO-8601 UTC, e.g. "2025-01-31T12:00:00Z"
  nlohmann::json settings;             // opaque: whatever the prep job passes
  nlohmann::json vocabulary;           // opaque; see cache_inspector.h for what inspect understands
  std::vector<std::string> languages;  // index /language codes point here
  std::vector<std::string> speakers;   // index /speaker codes point here
  std::vector<ManifestShard> shards;   // in cache order (ascending shard number)
  ManifestTotals totals;
  std::string index = "index.h5";
  // "mel_statistics": {"frames", "mean", "std"}, derived from the shards' /mel_sum and
  // /mel_sum_sq when the index is built. Optional within format_version 1: absent in caches
  // written before it existed, and when any shard lacks the sums.
  std::optional<MelStatistics> mel_statistics;

  nlohmann::json to_json() const;
  // Throws CacheError naming source for a wrong format, version, or a missing/mistyped field
  // (mel_statistics may be absent; when present, mean and std must be lists of equal length).
  static Manifest from_json(const nlohmann::json& json, const std::string& source);

  // Reads dir/manifest.json; CacheError when missing (says how to build a cache), unparsable or of
  // another format version.
  static Manifest read(const std::filesystem::path& dir);
  // Writes dir/manifest.json atomically: temporary file, fsync, rename, fsync of dir.
  void write(const std::filesystem::path& dir) const;
};

// The current UTC time as ISO-8601 ("2025-01-31T12:00:00Z").
std::string iso8601_now();

}  // namespace sluice::cache
