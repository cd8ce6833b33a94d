#pragma once
// `sluice cache inspect DIR`: what a cache holds. Lengths and counts come from the index; the
// vocabulary coverage reads every shard's /tokens column (a few MB per 10k samples).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/manifest.h"
#include "cache/mel_statistics.h"

namespace sluice::cache {

// Fixed-width bins from 0: counts[i] holds values in [i * bin_width, (i + 1) * bin_width);
// values at or past counts.size() * bin_width go to overflow.
struct Histogram {
  std::string unit;  // "frames", "tokens", "s"
  double bin_width = 1.0;
  std::vector<int64_t> counts;
  int64_t overflow = 0;
  int64_t n = 0;
  double min = 0, max = 0, mean = 0;
};

struct NameCount {
  std::string name;
  int64_t samples = 0;
  double seconds = 0;
};

struct VocabularyCoverage {
  // From manifest["vocabulary"]: the length of its "tokens" (list or object), "symbols" list or
  // "size" number, or of the vocabulary itself when it is a list; -1 when none of these is there.
  int64_t vocabulary_size = -1;
  int64_t distinct_ids = 0;   // distinct token ids in the cache
  int64_t used_in_range = 0;  // distinct ids in [0, vocabulary_size)
  int64_t out_of_range = 0;   // distinct ids outside it (a tokenizer/vocabulary mismatch)
  int32_t min_id = 0, max_id = 0;
};

struct InspectResult {
  std::filesystem::path dir;
  std::string fingerprint;
  std::string created;
  int64_t shards = 0;
  int64_t n_mels = 0;
  ManifestTotals totals;
  Histogram frames, tokens, seconds;
  // The corpus the cache was made from: its layout as prep read it (manifest settings
  // corpus.layout, else corpus.format; "" for a manifest without either).
  std::string corpus_format;
  std::vector<NameCount> languages, speakers;  // most samples first
  VocabularyCoverage vocabulary;
  // The manifest's per-bin statistics; nullopt for a cache written before them (the text then
  // says so and that re-running `sluice prep` writes them; the JSON has null).
  std::optional<MelStatistics> mel_statistics;

  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Throws CacheError when the cache cannot be read (see CacheReader::open for the messages).
InspectResult inspect_cache(const std::filesystem::path& dir);

}  // namespace sluice::cache
