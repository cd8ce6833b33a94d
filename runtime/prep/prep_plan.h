#pragma once
// What `sluice prep` will write, decided once on rank 0 and broadcast: the fingerprint, the
// shards (contiguous ranges of corpus rows) and the order they are handed out in; and the
// ShardDispenser that hands them out on rank 0.
//
// Shards are defined by row numbers alone, never by the number of ranks, so a resumed job may
// run on a different number of ranks and still keep every finished shard. Which rank writes a
// shard is decided while the job runs, not in the plan: a rank that runs faster (a quieter core,
// a faster node) takes more, so all ranks finish together (a static split by audio duration left
// one of two equal ranks idle for 13% of a 24 h job: two vCPUs of one machine ran the mel at
// speeds 10-17% apart, and which was slower changed from run to run).
#include <cstdint>
#include <optional>
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
  std::vector<int64_t> shard_order;  // every shard once, longest audio first: the hand-out order
  std::vector<double> item_seconds;  // probed duration of each item

  int64_t shard_count() const { return static_cast<int64_t>(shard_order.size()); }
  int64_t shard_begin(int64_t shard) const { return shard * shard_size; }
  int64_t shard_end(int64_t shard) const { return std::min(item_count, (shard + 1) * shard_size); }
  // The shard `rank` starts with, without asking: rank r of N takes shard_order[r], so the N
  // longest go out at once and every rank has work while the first requests travel. None when
  // there are fewer shards than ranks.
  std::optional<int64_t> first_shard(int rank) const;

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

// Shard numbers by decreasing duration, ties by number: long shards first, short ones at the end,
// where they even out the ranks' finishing times.
std::vector<int64_t> longest_first(const std::vector<double>& shard_seconds);

// Rank 0's hand-out of the plan's shards after each rank's first (guided self-scheduling): a rank
// about to run out asks and gets the next ceil(left / (4 x ranks)) shards of shard_order, so
// early pieces are large (few messages: about 4 x ranks x ln(shards) requests in all) and the
// last ones single shards (the ranks finish within about one shard of each other).
class ShardDispenser {
 public:
  ShardDispenser(const PrepPlan& plan, int ranks);
  // The next piece; empty once every shard is out or after stop().
  std::vector<int64_t> next();
  // Hands out nothing more (a rank failed: the job will fail, the shards not yet out are left to
  // the rerun, and the other ranks finish what they hold sooner).
  void stop() { stopped_ = true; }
  int64_t left() const { return stopped_ ? 0 : static_cast<int64_t>(order_.size()) - next_; }

 private:
  std::vector<int64_t> order_;
  int64_t next_ = 0;
  int ranks_ = 1;
  bool stopped_ = false;
};

PrepPlan make_plan(std::string fingerprint, int64_t shard_size, const std::vector<ItemProbe>& probes);

}  // namespace sluice::runtime
