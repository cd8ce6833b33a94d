#pragma once
// What `sluice train` takes from the cache it trains on. The cache's manifest.json records the
// settings `sluice prep` made it with (features.*, text.*, corpus.*, cache.*, prep.min/max_seconds:
// runtime::output_settings) and its vocabulary; the model is built from what is on disk, so
// these settings are the cache's, not the config's:
//   - a setting the user gave (config file or --set) that differs from the manifest is a
//     ConfigError (exit 2) naming the setting, both values and what to do;
//   - a setting the user did not give is taken from the manifest (origin "cache DIR/manifest.json"),
//     so that RUN_DIR/sluice-train.yaml says what the run trained on.
// And a run directory remembers the cache it trained on (RUN_DIR/cache.json): --resume on a
// cache with another fingerprint is a ConfigError, since the checkpoint's model was built for the
// other cache's features and vocabulary.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/config.h"

namespace sluice::runtime {

// `given` with every setting of `manifest`'s "settings" that the schema knows taken from the
// cache. Throws ConfigError listing every given setting that disagrees (from `cache_dir`'s
// manifest), and CacheError when the manifest has no usable vocabulary.
config::Config agree_with_cache(const config::Config& given, const nlohmann::json& manifest,
                                const std::filesystem::path& cache_dir);

// The number of token ids the model's embedding needs: the manifest vocabulary's "symbols".
// Throws CacheError naming the manifest when it has none.
int vocabulary_size(const nlohmann::json& manifest, const std::filesystem::path& cache_dir);

// What RUN_DIR/cache.json records of the cache a run trains on; for a mixture
// (CacheReader::open_mixture's manifest) also "mixture": each cache's dir, fingerprint and sample
// count (train_job.cpp adds the weights and "mixture_temperature").
nlohmann::json cache_record(const nlohmann::json& manifest, const std::filesystem::path& cache_dir);

// --resume: throws ConfigError when RUN_DIR/cache.json names a cache with another fingerprint
// than `record`'s, or another mixture (caches by fingerprint, order, weights, temperature), naming
// both (a run directory written before cache.json existed passes).
void check_resumed_cache(const std::filesystem::path& run_dir, const nlohmann::json& record);

// Writes RUN_DIR/cache.json (atomically; rank 0 only).
void write_cache_record(const std::filesystem::path& run_dir, const nlohmann::json& record);

}  // namespace sluice::runtime
