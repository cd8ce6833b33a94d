#include "runtime/prep/plan_agreement.h"

#include <sys/stat.h>

#include <filesystem>

#include "cache/shard_reader.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/log.h"
#include "dataset/audio.h"
#include "runtime/prep/prep_job.h"
#include "runtime/prep/prep_protocol.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

// Step 2: the header probe of every size-th item, starting at this rank.
json probe_share(const dataset::CorpusListing& listing, int rank, int size) {
  json rows = json::array();
  for (size_t i = static_cast<size_t>(rank); i < listing.items.size(); i += static_cast<size_t>(size)) {
    const auto& item = listing.items[i];
    ItemProbe probe;
    if (!item.reject) {
      try {
        const dataset::AudioInfo info = dataset::probe_audio(item.audio);
        probe = {info.seconds, info.file_bytes, info.modified_ns};
      } catch (const dataset::SampleRejected&) {
        // The worker decodes it again and records the reason; here it only weighs nothing, but
        // its size and time still go into the fingerprint (a missing file stays at -1).
        struct stat status {};
        if (::stat(item.audio.c_str(), &status) == 0) {
          probe.bytes = static_cast<int64_t>(status.st_size);
          probe.mtime_ns = modified_ns(status);
        }
      }
    }
    rows.push_back({i, probe.seconds, probe.bytes, probe.mtime_ns});
  }
  return rows;
}

std::vector<ItemProbe> collect_probes(const std::vector<std::string>& shares, size_t items) {
  std::vector<ItemProbe> probes(items);
  for (const auto& share : shares) {
    for (const auto& row : json::parse(share)) {
      auto& probe = probes.at(row[0].get<size_t>());
      probe.seconds = row[1].get<double>();
      probe.bytes = row[2].get<int64_t>();
      probe.mtime_ns = row[3].get<int64_t>();
    }
  }
  return probes;
}

// Names the settings that differ between an existing cache and this run, for the refusal message.
std::string describe_difference(const json& old_settings, const json& new_settings) {
  std::string changed;
  const json diff = json::diff(old_settings, new_settings);
  for (const auto& change : diff) {
    std::string path = change["path"].get<std::string>().substr(1);
    for (auto& c : path) c = c == '/' ? '.' : c;
    changed += (changed.empty() ? "" : ", ") + path;
  }
  return changed.empty() ? "the corpus changed (rows, texts, or audio file sizes/mtimes)"
                         : "settings changed: " + changed;
}

// Step 3 on rank 0: an existing finished cache is either ours (same fingerprint: keep it), or is
// replaced only when the user asked for it. Returns the refusal message, or "".
std::string check_existing_cache(const fs::path& dir, const std::string& fingerprint,
                                 const json& settings, bool overwrite) {
  const fs::path manifest_path = dir / "manifest.json";
  if (!fs::exists(manifest_path)) return "";
  json manifest;
  try {
    manifest = json::parse(read_file(manifest_path));
  } catch (const std::exception& error) {
    return "cannot read the existing " + manifest_path.string() + " (" + error.what() +
           "); remove it or set prep.overwrite=true";
  }
  if (manifest.value("fingerprint", "") == fingerprint) return "";
  const std::string why = describe_difference(manifest.value("settings", json::object()), settings);
  if (!overwrite) {
    return "the cache in " + dir.string() + " was made from other inputs: " + why +
           ". Use another cache.dir, or --overwrite (prep.overwrite=true) to rebuild it";
  }
  logger()->warn("replacing the cache in {}: {}", dir.string(), why);
  for (const char* name : {"manifest.json", "index.h5", "rejects.jsonl"}) fs::remove(dir / name);
  return "";
}

}  // namespace

PlanAgreement agree_on_plan(const MpiSession& session, const PrepSettings& settings,
                            const dataset::CorpusListing& listing, const json& vocabulary_json,
                            const std::string& lock_refusal) {
  const fs::path& dir = settings.cache_dir;
  const double timeout_s = settings.timeout_s;
  // A rank 0 that is locked out skips its probes: a one-process prep is refused at once.
  const json mine = lock_refusal.empty() ? probe_share(listing, session.rank(), session.size()) : json::array();
  const auto shares = gather_strings(session, mine.dump(), tag_probe, timeout_s, "audio header probes");
  std::string plan_text;
  if (session.rank() == 0) {
    const auto probes = collect_probes(shares, listing.items.size());
    const std::string fingerprint = compute_fingerprint(settings.output, vocabulary_json, listing, probes);
    const bool locked_out = !lock_refusal.empty();
    const std::string refusal =
        locked_out ? lock_refusal : check_existing_cache(dir, fingerprint, settings.output, settings.overwrite);
    if (refusal.empty()) {
      // A killed run's temporaries never read as shards; clear them before anyone writes.
      if (int removed = cache::remove_shard_temporaries(dir)) {
        logger()->info("removed {} temporary file(s) left by an interrupted run", removed);
      }
      const PrepPlan plan = make_plan(fingerprint, settings.shard_size, probes);
      plan_text = json{{"plan", plan.to_json()}}.dump();
    } else {
      plan_text = json{{"refuse", refusal}, {"exit", locked_out ? prep_failed : prep_refused}}.dump();
    }
  }
  const json message = json::parse(broadcast_string(session, plan_text, tag_plan, timeout_s, "the prep plan"));
  if (message.contains("refuse")) {
    if (session.rank() == 0) logger()->error("{}", message["refuse"].get<std::string>());
    return {std::nullopt, message.value("exit", prep_refused)};
  }
  return {PrepPlan::from_json(message["plan"]), prep_ok};
}

}  // namespace sluice::runtime
