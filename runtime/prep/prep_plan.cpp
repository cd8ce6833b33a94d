#include "runtime/prep/prep_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "common/fingerprint.h"

namespace sluice::runtime {

nlohmann::json PrepPlan::to_json() const {
  return {{"fingerprint", fingerprint},
          {"shard_size", shard_size},
          {"item_count", item_count},
          {"shard_order", shard_order},
          {"item_seconds", item_seconds}};
}

PrepPlan PrepPlan::from_json(const nlohmann::json& json) {
  PrepPlan plan;
  plan.fingerprint = json.at("fingerprint").get<std::string>();
  plan.shard_size = json.at("shard_size").get<int64_t>();
  plan.item_count = json.at("item_count").get<int64_t>();
  plan.shard_order = json.at("shard_order").get<std::vector<int64_t>>();
  plan.item_seconds = json.at("item_seconds").get<std::vector<double>>();
  return plan;
}

std::string compute_fingerprint(const nlohmann::json& output_settings,
                                const nlohmann::json& vocabulary,
                                const dataset::CorpusListing& listing,
                                const std::vector<ItemProbe>& probes) {
  Fingerprint fingerprint;
  fingerprint.add("cache_format_version", int64_t{1});
  fingerprint.add("settings", output_settings.dump());
  fingerprint.add("vocabulary", vocabulary.dump());
  fingerprint.add("format", listing.format);
  fingerprint.add("items", static_cast<int64_t>(listing.items.size()));
  for (size_t i = 0; i < listing.items.size(); ++i) {
    const auto& item = listing.items[i];
    fingerprint.add("id", item.id).add("text", item.text).add("speaker", item.speaker);
    fingerprint.add("language", item.language);
    fingerprint.add("audio", item.audio.lexically_relative(listing.root).string());
    fingerprint.add("reject", item.reject ? dataset::to_string(*item.reject) : "");
    fingerprint.add("bytes", probes[i].bytes).add("mtime", probes[i].mtime_ns);
  }
  return fingerprint.hex();
}

std::optional<int64_t> PrepPlan::first_shard(int rank) const {
  if (rank < 0 || rank >= shard_count()) return std::nullopt;
  return shard_order[static_cast<size_t>(rank)];
}

std::vector<int64_t> longest_first(const std::vector<double>& shard_seconds) {
  std::vector<int64_t> order(shard_seconds.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return shard_seconds[static_cast<size_t>(a)] > shard_seconds[static_cast<size_t>(b)];
  });
  return order;
}

ShardDispenser::ShardDispenser(const PrepPlan& plan, int ranks)
    : order_(plan.shard_order), ranks_(std::max(1, ranks)) {
  next_ = std::min<int64_t>(ranks_, static_cast<int64_t>(order_.size()));  // the first shards (first_shard)
}

std::vector<int64_t> ShardDispenser::next() {
  const int64_t piece = std::max<int64_t>(1, (left() + 4 * ranks_ - 1) / (4 * ranks_));
  const int64_t end = next_ + std::min(piece, left());
  std::vector<int64_t> shards(order_.begin() + next_, order_.begin() + end);
  next_ = end;
  return shards;
}

PrepPlan make_plan(std::string fingerprint, int64_t shard_size, const std::vector<ItemProbe>& probes) {
  PrepPlan plan;
  plan.fingerprint = std::move(fingerprint);
  plan.shard_size = shard_size;
  plan.item_count = static_cast<int64_t>(probes.size());
  for (const auto& probe : probes) plan.item_seconds.push_back(probe.seconds);
  const int64_t shards = (plan.item_count + shard_size - 1) / shard_size;
  std::vector<double> shard_seconds(static_cast<size_t>(shards), 0.0);
  for (int64_t i = 0; i < plan.item_count; ++i) {
    // Every row costs something even when its audio is unknown (a missing file is still a row
    // to decode and reject), so such shards sort by their row count, not all as zero.
    shard_seconds[static_cast<size_t>(i / shard_size)] += plan.item_seconds[static_cast<size_t>(i)] + 1e-3;
  }
  plan.shard_order = longest_first(shard_seconds);
  return plan;
}

}  // namespace sluice::runtime
