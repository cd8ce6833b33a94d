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
          {"shard_owner", shard_owner},
          {"item_seconds", item_seconds}};
}

PrepPlan PrepPlan::from_json(const nlohmann::json& json) {
  PrepPlan plan;
  plan.fingerprint = json.at("fingerprint").get<std::string>();
  plan.shard_size = json.at("shard_size").get<int64_t>();
  plan.item_count = json.at("item_count").get<int64_t>();
  plan.shard_owner = json.at("shard_owner").get<std::vector<int>>();
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

std::vector<int> assign_shards(const std::vector<double>& shard_seconds, int ranks) {
  std::vector<size_t> order(shard_seconds.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return shard_seconds[a] > shard_seconds[b]; });
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  std::vector<int> owner(shard_seconds.size(), 0);
  for (size_t shard : order) {
    const auto least = std::min_element(load.begin(), load.end());
    owner[shard] = static_cast<int>(least - load.begin());
    *least += shard_seconds[shard];
  }
  return owner;
}

PrepPlan make_plan(std::string fingerprint, int64_t shard_size, const std::vector<ItemProbe>& probes,
                   int ranks) {
  PrepPlan plan;
  plan.fingerprint = std::move(fingerprint);
  plan.shard_size = shard_size;
  plan.item_count = static_cast<int64_t>(probes.size());
  for (const auto& probe : probes) plan.item_seconds.push_back(probe.seconds);
  const int64_t shards = (plan.item_count + shard_size - 1) / shard_size;
  std::vector<double> shard_seconds(static_cast<size_t>(shards), 0.0);
  for (int64_t i = 0; i < plan.item_count; ++i) {
    // Every shard costs something even when its audio is unknown, so that empty or broken
    // shards still spread over ranks instead of piling onto rank 0.
    shard_seconds[static_cast<size_t>(i / shard_size)] += plan.item_seconds[static_cast<size_t>(i)] + 1e-3;
  }
  plan.shard_owner = assign_shards(shard_seconds, ranks);
  return plan;
}

}  // namespace sluice::runtime
