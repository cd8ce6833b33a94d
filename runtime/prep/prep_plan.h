#pragma once
// What `sluice prep` will write, decided once on rank 0 and broadcast: the fingerprint, the
// shards (contiguous ranges of corpus rows) and which rank writes each.
//
// Shards are defined by row numbers alone, never by the number of ranks, so a resumed job may
// run on a different number of ranks and still keep every finished shard.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataset/corpus.h"

namespace sluice::runtime {

// What the header probe learnt about one corpus item's audio file.
struct ItemProbe {
  double seconds = 0.0;   // 0 when unknown (missing or unreadable: the worker will say why)
  int64_t bytes = -1;     // -1 when the file does not exist
  int64_t mtime_ns = 0;
};

struct PrepPlan {
  std::string fingerprint;
  int64_t shard_size = 1;
  int64_t item_count = 0;
  std::vector<int> shard_owner;      // writing rank of each shard
  std::vector<double> item_seconds;  // probed duration of each item

  int64_t shard_count() const { return static_cast<int64_t>(shard_owner.size()); }
  int64_t shard_begin(int64_t shard) const { return shard * shard_size; }
  int64_t shard_end(int64_t shard) const { return std::min(item_count, (shard + 1) * shard_size); }

  nlohmann::json to_json() const;
  static PrepPlan from_json(const nlohmann::json& json);
};

// Hash over everything that changes the cache's content: the output settings, the vocabulary,
// every listed item (id, text, speaker, language, audio path relative to the root, listing-level
// reject) and every audio file's size and modification time. File contents are not read: a file
// rewritten with the same size and mtime is not noticed (documented in docs/cache-format.md).
std::string compute_fingerprint(const nlohmann::json& output_settings,
                                const nlohmann::json& vocabulary,
                                const dataset::CorpusListing& listing,
                                const std::vector<ItemProbe>& probes);

// Longest-processing-time-first: shards by decreasing duration, each to the rank with the least
// audio so far (ties to the lower rank). Deterministic; within 4/3 of the optimal makespan.
std::vector<int> assign_shards(const std::vector<double>& shard_seconds, int ranks);

PrepPlan make_plan(std::string fingerprint, int64_t shard_size, const std::vector<ItemProbe>& probes,
                   int ranks);

}  // namespace sluice::runtime
