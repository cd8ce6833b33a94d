#include "runtime/prep/prep_job.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cache/cache_index.h"
#include "cache/shard_reader.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file_lock.h"
#include "common/file_util.h"
#include "common/heartbeat_tree.h"
#include "common/host.h"
#include "common/log.h"
#include "common/slurm_env.h"
#include "dataset/audio.h"
#include "runtime/rank_timing.h"
#include "dataset/phonemizer.h"
#include "dataset/vocabulary.h"
#include "runtime/prep/prep_plan.h"
#include "runtime/prep/progress_line.h"
#include "runtime/settings.h"
#include "runtime/prep/shard_builder.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Message tags of the prep protocol (see prep_job.h).
enum Tag : int {
  tag_probe = 101, tag_plan, tag_heartbeat, tag_ping, tag_result, tag_outcome, tag_timeline,
  tag_shard_request,  // a rank about to run out of shards asks rank 0 for more (payload: "")
  tag_shard_grant,    // rank 0's answer: a JSON array of shard numbers, [] when none are left
};

// A rank asks for more shards when fewer than this many of its own are not yet begun: one to
// work on while the request travels (rank 0 polls every 20 ms; a shard of 256 clips takes ~0.2 s).
constexpr int64_t shards_ahead_wanted = 2;

// Gives the builder the shards rank 0 handed out; none means none will come. Returns whether the
// builder is now closed.
bool hand_to(ShardBuilder& builder, const std::vector<int64_t>& shards) {
  for (int64_t shard : shards) builder.add(shard);
  if (shards.empty()) builder.close();
  return shards.empty();
}

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

// A beat's progress in the heartbeat tree: the builder's counters, summed up the tree.
json progress_payload(const BuildProgress& progress) {
  return {{"items", progress.items.load()},
          {"audio_ms", progress.audio_ms.load()},
          {"rejects", progress.rejects.load()},
          {"total_items", progress.total_items.load()},
          {"total_audio_ms", progress.total_audio_ms.load()}};
}

std::string error_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// "environment" when the machine refused (a full disk, a read-only file system), which has its own
// exit code; "" for every other failure.
std::string error_kind(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::environment ? "environment" : "";
  } catch (...) {
    return "";
  }
}

json result_json(const BuildResult& result, int rank, const std::string& host) {
  json shards = json::array();
  int64_t kept = 0;
  for (const auto& shard : result.shards) {
    shards.push_back({shard.shard, shard.kept, shard.samples, shard.rejects});
    kept += shard.kept ? 1 : 0;
  }
  json unknown = json::object();
  for (const auto& [code_point, count] : result.unknown) unknown[std::to_string(code_point)] = count;
  return {{"rank", rank},
          {"host", host},
          {"ok", !result.error},
          {"error", result.error ? error_text(result.error) : ""},
          {"error_kind", result.error ? error_kind(result.error) : ""},
          {"shards", shards},
          {"shards_kept", kept},
          {"samples", result.samples},
          {"rejects", result.rejects},
          {"frames", result.frames},
          {"audio_seconds", result.audio_seconds},
          {"reject_reasons", result.reject_reasons},
          {"unknown", unknown},
          {"wall_seconds", result.wall_seconds},
          {"stages",
           {{"decode", result.stages.decode},
            {"text", result.stages.text},
            {"features", result.stages.features},
            {"write", result.stages.write}}}};
}

// The prep job's heartbeat tree (common/heartbeat_tree.h); its beats carry progress_payload().
HeartbeatTree progress_tree(const MpiSession& session, double interval_s, double timeout_s) {
  return HeartbeatTree(session, interval_s, timeout_s, {tag_heartbeat, tag_ping},
                       {"prep", "finished shards are kept for a rerun"});
}

// Rank 0 (not rank 0's own words): the first silent rank the tree names, as the job's error.
[[noreturn]] void throw_silent(const MpiSession& session, const json& silent, double timeout_s) {
  const int rank = silent["rank"].get<int>();
  const int noticed_by = silent["noticed_by"].get<int>();
  const json& last = silent["last"];
  throw TransportError(session.describe(rank) + " (prep writer) has been silent for " +
                       std::to_string(static_cast<int>(silent["seconds"].get<double>())) + " s (runtime.timeout_s = " +
                       std::to_string(timeout_s) + ")" +
                       (noticed_by == 0 ? "" : ", as its parent rank " + std::to_string(noticed_by) + " reports") +
                       "; last progress: " + (last.is_null() ? std::string("none") : last.dump()) +
                       ". Check that rank's log; finished shards are kept for a rerun");
}

// Rank 0 between the plan and the results: hands out the shards (its own builder's too), takes
// the results, and at the top of the heartbeat tree prints the job's progress and fails it naming
// a silent rank. Returns every rank's result (index = rank).
std::vector<json> supervise(const MpiSession& session, ShardBuilder& builder, const PrepPlan& plan,
                            double interval_s, double timeout_s) {
  const int size = session.size();
  std::vector<json> results(static_cast<size_t>(size));
  HeartbeatTree tree = progress_tree(session, interval_s, timeout_s);
  ProgressLine line("prep");
  ShardDispenser dispenser(plan, size);
  // The totals are the plan's: the beats' count only the shards handed out so far.
  const double total_audio_seconds = std::accumulate(plan.item_seconds.begin(), plan.item_seconds.end(), 0.0);
  bool own_closed = false;
  int pending = size;
  const auto take_result = [&](int rank, json result) {
    if (!result["ok"].get<bool>()) dispenser.stop();
    results[static_cast<size_t>(rank)] = std::move(result);
    --pending;
  };
  while (pending > 0) {
    std::string payload;
    int sender = -1;
    while (try_receive_string(session, tag_result, payload, sender)) take_result(sender, json::parse(payload));
    while (try_receive_string(session, tag_shard_request, payload, sender)) {
      send_string(session, sender, tag_shard_grant, json(dispenser.next()).dump(), deadline_after(timeout_s),
                  "shards for " + session.describe(sender));
    }
    if (!own_closed && builder.shards_ahead() < shards_ahead_wanted) own_closed = hand_to(builder, dispenser.next());
    if (results[0].is_null() && builder.done()) take_result(0, result_json(builder.finish(), 0, session.host()));
    if (tree.poll(progress_payload(builder.progress()))) {
      const json beat = tree.subtree_beat(progress_payload(builder.progress()));
      if (!beat["silent"].empty()) {
        line.finish();
        throw_silent(session, beat["silent"][0], timeout_s);
      }
      ProgressCounts counts;
      counts.items = beat["items"].get<int64_t>();
      counts.total_items = plan.item_count;
      counts.audio_seconds = beat["audio_ms"].get<double>() / 1000.0;
      counts.total_audio_seconds = total_audio_seconds;
      counts.rejects = beat["rejects"].get<int64_t>();
      line.update(counts);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  line.finish();
  return results;
}

// Ranks other than 0: ask rank 0 for shards as the builder runs low, send the result when the
// builder is done, and beat in the heartbeat tree until the outcome comes.
int follow(const MpiSession& session, ShardBuilder& builder, double interval_s, double timeout_s) {
  HeartbeatTree tree = progress_tree(session, interval_s, timeout_s);
  bool sent = false, closed = false;
  bool asked = false;  // a request is in flight, sent at asked_at
  Clock::time_point asked_at;
  while (true) {
    std::string payload;
    int sender = -1;
    if (sent && try_receive_string(session, tag_outcome, payload, sender)) return std::stoi(payload);
    tree.poll(progress_payload(builder.progress()));
    if (!closed && !asked && !builder.done() && builder.shards_ahead() < shards_ahead_wanted) {
      send_string(session, 0, tag_shard_request, "", deadline_after(timeout_s), "a request for shards");
      asked = true;
      asked_at = Clock::now();
    }
    if (asked && try_receive_string(session, tag_shard_grant, payload, sender)) {
      closed = hand_to(builder, json::parse(payload).get<std::vector<int64_t>>());
      asked = false;
    } else if (asked && !builder.done() && seconds_since(asked_at) > timeout_s) {
      throw TransportError(session.describe(0) + " (prep coordinator) has not answered a request for shards in " +
                           std::to_string(static_cast<int>(seconds_since(asked_at))) +
                           " s (runtime.timeout_s); finished shards are kept for a rerun");
    }
    if (!sent && builder.done()) {
      const BuildResult result = builder.finish();
      if (result.error) logger()->error("{}", error_text(result.error));
      send_string(session, 0, tag_result, result_json(result, session.rank(), session.host()).dump(),
                  deadline_after(timeout_s), "the prep result");
      sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void print_summary(const std::vector<json>& results, const json& totals, double wall_s,
                   const std::map<std::string, int64_t>& reasons, const dataset::UnknownCounts& unknown) {
  std::printf("\n%-5s %-14s %7s %7s %8s %8s %9s %8s %11s\n", "rank", "host", "shards", "kept",
              "samples", "rejects", "audio h", "wall s", "audio-s/s");
  for (const auto& r : results) {
    const double audio = r["audio_seconds"].get<double>();
    const double wall = r["wall_seconds"].get<double>();
    std::printf("%-5d %-14s %7zu %7lld %8lld %8lld %9.3f %8.1f %11.0f\n", r["rank"].get<int>(),
                r["host"].get<std::string>().substr(0, 14).c_str(), r["shards"].size(),
                r["shards_kept"].get<long long>(), r["samples"].get<long long>(),
                r["rejects"].get<long long>(), audio / 3600.0, wall, wall > 0 ? audio / wall : 0.0);
  }
  std::printf("total: %lld samples, %lld rejects, %.3f h audio, %lld frames, %lld shards in %.1f s\n",
              totals["samples"].get<long long>(), totals["rejects"].get<long long>(),
              totals["seconds"].get<double>() / 3600.0, totals["frames"].get<long long>(),
              totals.value("shards", 0LL), wall_s);
  if (!reasons.empty()) {
    std::printf("rejects by reason:");
    for (const auto& [reason, count] : reasons) std::printf(" %s=%lld", reason.c_str(), static_cast<long long>(count));
    std::printf(" (details in rejects.jsonl)\n");
  }
  if (!unknown.empty()) {
    std::printf("characters not in the vocabulary (mapped to <unk>): %s\n",
                dataset::describe_unknown(unknown).c_str());
  }
  std::fflush(stdout);
}

// Step 5 on rank 0: every rank succeeded; write rejects.jsonl, index.h5, manifest.json (last).
int finalize(const config::Config& config, const PrepPlan& plan, const json& out_settings,
             const json& vocabulary, const std::vector<json>& results, double wall_s) {
  const fs::path dir = config.string("cache.dir");
  std::vector<fs::path> shard_files;
  for (int64_t shard = 0; shard < plan.shard_count(); ++shard) {
    shard_files.push_back(dir / cache::shard_file_name(shard));
  }
  // Shards beyond this plan's count belong to an older layout; they would confuse a reader.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) == 0 && std::find(shard_files.begin(), shard_files.end(), entry.path()) == shard_files.end()) {
      logger()->info("removing {}: not part of this cache's {} shards", name, plan.shard_count());
      fs::remove(entry.path());
    }
  }
  // One pass over the shards builds the index and collects their rejects. index.h5 alone does not
  // make a cache: only the manifest, written below when the rejects are within bounds, does.
  cache::IndexSummary summary = cache::write_index(dir, shard_files);
  std::string rejects_text;
  std::map<std::string, int64_t> reasons;
  for (const auto& line : summary.reject_lines) {
    rejects_text += line + "\n";
    ++reasons[json::parse(line).value("reason", "unknown")];
  }
  const auto reject_count = static_cast<int64_t>(summary.reject_lines.size());
  write_file_atomically(dir / "rejects.jsonl", rejects_text);
  config.write(dir / "sluice-prep.yaml");

  dataset::UnknownCounts unknown;
  for (const auto& r : results) {
    for (const auto& [code_point, count] : r["unknown"].items()) {
      unknown[static_cast<char32_t>(std::stoul(code_point))] += count.get<int64_t>();
    }
  }
  const double fraction = plan.item_count > 0 ? double(reject_count) / double(plan.item_count) : 0.0;
  const double allowed = config.number("prep.max_reject_fraction");

  nlohmann::json unknown_json = json::object();
  for (const auto& [code_point, count] : unknown) unknown_json[std::to_string(code_point)] = count;
  // The prep job's own record, next to the cache: who wrote what, how fast, and what was skipped.
  const json report = {{"corpus", config.string("corpus.path")},
                       {"corpus_rows", plan.item_count},
                       {"fingerprint", plan.fingerprint},
                       {"wall_seconds", wall_s},
                       {"ranks", results},
                       {"rejects", reject_count},
                       {"reject_reasons", reasons},
                       {"unknown_characters", dataset::describe_unknown(unknown)},
                       {"unknown_code_points", unknown_json}};
  write_file_atomically(dir / "prep-report.json", report.dump(2) + "\n");
  if (fraction > allowed) {
    json totals = {{"samples", 0}, {"rejects", reject_count}, {"seconds", 0.0}, {"frames", 0}};
    print_summary(results, totals, wall_s, reasons, unknown);
    logger()->error(
        "{} of {} corpus rows were rejected ({:.1f}%), more than prep.max_reject_fraction = {:.1f}%: "
        "no manifest was written. See {} for every reject and its reason; fix the corpus, or raise "
        "prep.max_reject_fraction and rerun (finished shards are kept)",
        reject_count, plan.item_count, 100 * fraction, 100 * allowed, (dir / "rejects.jsonl").string());
    return prep_too_many_rejects;
  }
  const cache::Manifest manifest = cache::write_manifest(dir, std::move(summary), out_settings, vocabulary);
  json totals = manifest.to_json()["totals"];
  totals["shards"] = manifest.shards.size();
  print_summary(results, totals, wall_s, reasons, unknown);
  std::printf("cache ready: %s (fingerprint %s)\n", dir.c_str(), plan.fingerprint.c_str());
  return prep_ok;
}

// `failure`: when the job fails, why (stop_reason, error, error_rank, error_host) for the timeline
// summary, so that the report names the error instead of a hang.
int coordinate(const MpiSession& session, const config::Config& config, ShardBuilder& builder, const PrepPlan& plan,
               const json& out_settings, const json& vocabulary_json, Clock::time_point started, json& failure);

// The shard builder's settings from the config; threads default to the cores this rank may use
// (when ranks share a node unbound, a share of them).
BuildSettings build_settings(const MpiSession& session, const config::Config& config) {
  BuildSettings settings;
  settings.mel = mel_config(config);
  settings.text = text_config(config);
  settings.tokenizer = config.string("text.tokenizer");
  settings.min_seconds = config.number("prep.min_seconds");
  settings.max_seconds = config.number("prep.max_seconds");
  settings.max_tokens = config.integer("prep.max_tokens");
  settings.max_tokens_per_second = config.number("prep.max_tokens_per_second");
  settings.cache_dir = config.string("cache.dir");
  settings.writer.chunk_frames = static_cast<int>(config.integer("cache.chunk_frames"));
  settings.writer.gzip_level = static_cast<int>(config.integer("cache.gzip_level"));
  const int64_t threads = config.integer("prep.threads");
  const int cores = usable_cores();
  const int share = cores >= static_cast<int>(std::thread::hardware_concurrency()) ? cores / session.local_size() : cores;
  settings.threads = threads > 0 ? static_cast<int>(threads) : std::max(1, share);
  const std::string warning = binding_warning(settings.threads + 1);
  if (!warning.empty() && session.local_rank() == 0) {  // the same on every rank of the node
    logger()->warn("{} (prep: {} worker(s) + 1 writer)", warning, settings.threads);
  }
  if (settings.min_seconds >= settings.max_seconds) {
    throw ConfigError("prep.min_seconds (" + std::to_string(settings.min_seconds) +
                      ") must be below prep.max_seconds (" + std::to_string(settings.max_seconds) + ")");
  }
  return settings;
}

// What prep is about to read: the format (and what `auto` recognised it by), the rows, and a few
// of the corpus notes (duplicate audio files, language decisions) with the count of the rest.
void log_listing(const dataset::CorpusListing& listing, int ranks, int threads) {
  logger()->info("corpus {} ({}, recognised by {}): {} rows; {} rank(s) x {} thread(s)",
                 listing.listing_file.string(), listing.format, listing.recognised, listing.items.size(),
                 ranks, threads);
  for (size_t i = 0; i < std::min<size_t>(listing.notes.size(), 5); ++i) logger()->info("corpus: {}", listing.notes[i]);
  if (listing.notes.size() > 5) logger()->info("corpus: {} more note(s) of this kind", listing.notes.size() - 5);
}

// Steps 2-3: every rank probes its share of the audio headers; rank 0 plans the shards (or
// refuses an existing cache made from other inputs) and broadcasts the plan. nullopt: refused.
// `lock_refusal` (rank 0): why this job may not write the cache (another prep holds it), or "".
// On refusal `refusal_code` is the exit code.
std::optional<PrepPlan> agree_on_plan(const MpiSession& session, const config::Config& config,
                                      const dataset::CorpusListing& listing, const json& out_settings,
                                      const json& vocabulary_json, double timeout_s,
                                      const std::string& lock_refusal, int& refusal_code) {
  const fs::path dir = config.string("cache.dir");
  // A rank 0 that is locked out skips its probes: a one-process prep is refused at once.
  const json mine = lock_refusal.empty() ? probe_share(listing, session.rank(), session.size()) : json::array();
  const auto shares = gather_strings(session, mine.dump(), tag_probe, timeout_s, "audio header probes");
  std::string plan_text;
  if (session.rank() == 0) {
    const auto probes = collect_probes(shares, listing.items.size());
    const std::string fingerprint = compute_fingerprint(out_settings, vocabulary_json, listing, probes);
    const bool locked_out = !lock_refusal.empty();
    const std::string refusal = locked_out ? lock_refusal
                                           : check_existing_cache(dir, fingerprint, out_settings,
                                                                  config.boolean("prep.overwrite"));
    if (refusal.empty()) {
      // A killed run's temporaries never read as shards; clear them before anyone writes.
      if (int removed = cache::remove_shard_temporaries(dir)) {
        logger()->info("removed {} temporary file(s) left by an interrupted run", removed);
      }
      const PrepPlan plan = make_plan(fingerprint, config.integer("cache.shard_size"), probes);
      plan_text = json{{"plan", plan.to_json()}}.dump();
    } else {
      plan_text = json{{"refuse", refusal}, {"exit", locked_out ? prep_failed : prep_refused}}.dump();
    }
  }
  const json message = json::parse(broadcast_string(session, plan_text, tag_plan, timeout_s, "the prep plan"));
  if (message.contains("refuse")) {
    if (session.rank() == 0) logger()->error("{}", message["refuse"].get<std::string>());
    refusal_code = message.value("exit", prep_refused);
    return std::nullopt;
  }
  return PrepPlan::from_json(message["plan"]);
}

// Rank 0: the cache directory's prep lock (common/file_lock.h), or why it cannot be had
// ("another prep holds this cache (pid N on host H since T) ...").
std::string take_lock(const fs::path& dir, std::optional<FileLock>& lock) {
  const fs::path path = dir / "prep.lock";
  lock.emplace(path, ErrorKind::cache);
  if (lock->held()) return "";
  const std::string refusal = "another prep holds this cache (" + lock->holder() + "): " + path.string() +
                              " is locked. Wait for that prep to finish (or stop it), or write to another --out; "
                              "a prep that died releases the lock by itself";
  lock.reset();
  return refusal;
}

// Rank 0: the cache directory, created when missing; a file system that refuses is an
// EnvironmentError naming it.
void create_cache_dir(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw_file_error(error.value(), "create the cache directory", dir.string(), ErrorKind::cache);
}

// Timing: spans of every stage on every rank, clocks aligned to rank 0's (docs/report.md).
timing::RankTimeline prep_timeline(const MpiSession& session, const config::Config& config, int threads,
                                   double timeout_s) {
  timing::RankTimeline identity;
  identity.job = "prep";
  identity.rank = session.rank();
  identity.world_size = session.size();
  identity.host = session.host();
  identity.role = "prep";
  identity.settings = {{"cache.shard_size", config.integer("cache.shard_size")}, {"prep.threads", threads},
                       {"runtime.timeout_s", timeout_s},
                       {"prep.max_reject_fraction", config.number("prep.max_reject_fraction")}};
  return identity;
}

}  // namespace

std::future<dataset::CorpusListing> start_listing(const config::Config& config) {
  return std::async(std::launch::async, [path = config.string("corpus.path"), options = corpus_options(config)] {
    return dataset::read_corpus(path, options);
  });
}

int run_prep(const MpiSession& session, const config::Config& config,
             std::future<dataset::CorpusListing> listing_being_read) {
  const auto started = Clock::now();
  const double timeout_s = config.number("runtime.timeout_s");
  check_slurm_topology(session, timeout_s);  // Slurm's view of tasks and nodes must match MPI's
  const fs::path dir = config.string("cache.dir");
  BuildSettings settings = build_settings(session, config);

  const dataset::Vocabulary vocabulary = settings.tokenizer == "phonemes"
                                             ? dataset::Vocabulary::builtin_phonemes()
                                             : dataset::Vocabulary::builtin_characters();
  const json vocabulary_json = vocabulary.to_json();
  json out_settings = output_settings(config);
  if (settings.tokenizer == "phonemes") {
    // Phoneme strings change with espeak-ng's version and data: a new espeak is a new cache.
    out_settings["text"]["phonemizer"] = dataset::Phonemizer().engine_version();
  }

  // 1. The listing: every rank reads it (started before MPI); it is deterministic.
  const dataset::CorpusListing listing = listing_being_read.get();
  if (listing.items.empty()) {
    // The same on every rank: each says it and stops (no exchange has started yet).
    throw DataError("the corpus " + listing.listing_file.string() + " (" + listing.format +
                    ") has no samples: there is nothing to prepare. Check that file (is it empty?) and "
                    "corpus.path / corpus.format");
  }
  out_settings["corpus"]["layout"] = listing.format;  // what `auto` decided; `cache inspect` shows it
  // Rank 0 holds the directory's lock to the end of the job, before anything in it is read or
  // removed (a second prep would delete the first one's temporaries).
  std::optional<FileLock> lock;
  std::string lock_refusal;
  if (session.rank() == 0) {
    log_listing(listing, session.size(), settings.threads);
    create_cache_dir(dir);
    lock_refusal = take_lock(dir, lock);
  }

  // 2-3. Probe, plan, broadcast.
  int refusal_code = prep_refused;
  const std::optional<PrepPlan> agreed =
      agree_on_plan(session, config, listing, out_settings, vocabulary_json, timeout_s, lock_refusal, refusal_code);
  if (!agreed) return refusal_code;
  const PrepPlan& plan = *agreed;

  // 4. The shards: this rank's first one from the plan, the rest from rank 0 as it asks.
  RankTiming rank_timing(session, config, prep_timeline(session, config, settings.threads, timeout_s));
  settings.rank = session.rank();
  settings.delay = rank_timing.delay();

  ShardBuilder builder(listing, plan, settings, vocabulary);
  builder.start();
  if (const auto first = plan.first_shard(session.rank())) builder.add(*first);
  const double interval_s = config.number("prep.progress_interval_s");
  int outcome = prep_ok;
  json failure = json::object();
  try {
    outcome = session.rank() == 0
                  ? coordinate(session, config, builder, plan, out_settings, vocabulary_json, started, failure)
                  : follow(session, builder, interval_s, timeout_s);
  } catch (const Error& error) {
    rank_timing.write_failed(dir, error.what(), -1, json::object());
    throw;
  }
  // Too many rejects is a stop on purpose, not a failure: the report says why and points at the rejects.
  json stop = json::object();
  if (outcome == prep_too_many_rejects) {
    stop = {{"stop_reason", "too_many_rejects"}, {"rejects_file", (dir / "rejects.jsonl").string()}};
  } else if (outcome == prep_environment || outcome == prep_failed) {
    // A failure is no hang either: rank 0's timeline says which rank failed and on what.
    stop = failure.empty() ? json{{"stop_reason", outcome == prep_environment ? "environment_error" : "failed"}} : failure;
  }
  rank_timing.write_finished(dir, outcome == prep_ok ? "finished" : outcome == prep_too_many_rejects ? "stopped" : "failed",
                             stop, tag_timeline);
  return outcome;
}

namespace {

// Rank 0 after the plan: results, then the cache's metadata, then the outcome for everyone.
int coordinate(const MpiSession& session, const config::Config& config, ShardBuilder& builder, const PrepPlan& plan,
               const json& out_settings, const json& vocabulary_json, Clock::time_point started, json& failure) {
  const auto failed = [&](bool environment, int rank, const std::string& host, const std::string& error) {
    failure = {{"stop_reason", environment ? "environment_error" : "failed"},
               {"error", error},
               {"error_rank", rank},
               {"error_host", host}};
  };
  const double timeout_s = config.number("runtime.timeout_s");
  const double interval_s = config.number("prep.progress_interval_s");
  const auto results = supervise(session, builder, plan, interval_s, timeout_s);
  int outcome = prep_ok;
  for (const auto& r : results) {
    if (!r["ok"].get<bool>()) {
      const bool environment = r.value("error_kind", "") == "environment";
      logger()->error("rank {} ({}) failed: {}", r["rank"].get<int>(), r["host"].get<std::string>(),
                      r["error"].get<std::string>());
      // A full disk on one rank and a bug on another: the bug decides (it needs a person).
      if (outcome == prep_ok || (!environment && outcome == prep_environment)) {
        failed(environment, r["rank"].get<int>(), r["host"].get<std::string>(), r["error"].get<std::string>());
      }
      if (outcome == prep_ok || !environment) outcome = environment ? prep_environment : prep_failed;
    }
  }
  if (outcome == prep_ok) {
    try {
      outcome = finalize(config, plan, out_settings, vocabulary_json, results, seconds_since(started));
    } catch (const Error& error) {
      logger()->error("writing the cache's index and manifest failed: {}", error.what());
      outcome = error.kind() == ErrorKind::environment ? prep_environment : prep_failed;
      failed(outcome == prep_environment, session.rank(), session.host(),
             std::string("writing the cache's index and manifest failed: ") + error.what());
    } catch (const std::exception& error) {
      logger()->error("writing the cache's index and manifest failed: {}", error.what());
      outcome = prep_failed;
      failed(false, session.rank(), session.host(),
             std::string("writing the cache's index and manifest failed: ") + error.what());
    }
  }
  if (outcome == prep_failed || outcome == prep_environment) {
    logger()->info("no manifest was written; the finished shards are kept: rerun `sluice prep` with the same "
                   "settings to resume");
  }
  broadcast_string(session, std::to_string(outcome), tag_outcome, timeout_s, "the prep outcome");
  return outcome;
}

}  // namespace

}  // namespace sluice::runtime
