#pragma once
// The prep job's settings, typed: read once from the config (runtime/settings.h holds the one
// schema, with every default and range) and passed down, so that no piece of the job reads a key
// by its name.
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "runtime/prep/shard_builder.h"

namespace sluice::runtime {

struct PrepSettings {
  std::filesystem::path cache_dir;  // cache.dir
  std::string corpus_path;          // corpus.path (the prep report names it)
  double timeout_s = 120;           // runtime.timeout_s: every wait across ranks
  double progress_interval_s = 2;   // prep.progress_interval_s: progress lines and heartbeats
  bool overwrite = false;           // prep.overwrite: replace a cache made from other inputs
  int64_t shard_size = 256;         // cache.shard_size: rows a shard
  double max_reject_fraction = 0;   // prep.max_reject_fraction
  int64_t threads = 0;              // prep.threads as set (0: the cores this rank may use)
  // The shard builder's settings (features, text, limits, writer); its threads, rank and injected
  // delay are the rank's and are set by the job.
  BuildSettings build;
  // What the cache records as its settings (runtime/settings.h output_settings), with the
  // phonemizer's engine version when text.tokenizer is phonemes: a new espeak is a new cache. The
  // corpus layout that `auto` decided is added once the listing is read.
  nlohmann::json output;

  // Throws ConfigError when prep.min_seconds is not below prep.max_seconds.
  static PrepSettings read(const config::Config& config);
};

}  // namespace sluice::runtime
