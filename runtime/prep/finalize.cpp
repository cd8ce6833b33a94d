#include "runtime/prep/finalize.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "cache/cache_index.h"
#include "cache/shard_reader.h"
#include "common/file_util.h"
#include "common/log.h"
#include "runtime/prep/prep_job.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

void print_summary(const std::vector<PrepRankResult>& results, const json& totals, double wall_s,
                   const std::map<std::string, int64_t>& reasons, const dataset::UnknownCounts& unknown) {
  std::printf("\n%-5s %-14s %7s %7s %8s %8s %9s %8s %11s\n", "rank", "host", "shards", "kept",
              "samples", "rejects", "audio h", "wall s", "audio-s/s");
  for (const auto& r : results) {
    const double audio = r.audio_seconds;
    const double wall = r.wall_seconds;
    std::printf("%-5d %-14s %7zu %7lld %8lld %8lld %9.3f %8.1f %11.0f\n", r.rank, r.host.substr(0, 14).c_str(),
                r.shards.size(), static_cast<long long>(r.shards_kept), static_cast<long long>(r.samples),
                static_cast<long long>(r.rejects), audio / 3600.0, wall, wall > 0 ? audio / wall : 0.0);
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

}  // namespace

int finalize_cache(const PrepSettings& settings, const config::Config& config, const PrepPlan& plan,
                   const json& vocabulary, const std::vector<PrepRankResult>& results, double wall_s) {
  const fs::path& dir = settings.cache_dir;
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
    for (const auto& [code_point, count] : r.unknown) unknown[code_point] += count;
  }
  const double fraction = plan.item_count > 0 ? double(reject_count) / double(plan.item_count) : 0.0;
  const double allowed = settings.max_reject_fraction;

  nlohmann::json unknown_json = json::object();
  for (const auto& [code_point, count] : unknown) unknown_json[std::to_string(code_point)] = count;
  json ranks_json = json::array();
  for (const auto& r : results) ranks_json.push_back(r.to_json());
  // The prep job's own record, next to the cache: who wrote what, how fast, and what was skipped.
  const json report = {{"corpus", settings.corpus_path},
                       {"corpus_rows", plan.item_count},
                       {"fingerprint", plan.fingerprint},
                       {"wall_seconds", wall_s},
                       {"ranks", ranks_json},
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
  const cache::Manifest manifest = cache::write_manifest(dir, std::move(summary), settings.output, vocabulary);
  json totals = manifest.to_json()["totals"];
  totals["shards"] = manifest.shards.size();
  print_summary(results, totals, wall_s, reasons, unknown);
  std::printf("cache ready: %s (fingerprint %s)\n", dir.c_str(), plan.fingerprint.c_str());
  return prep_ok;
}

}  // namespace sluice::runtime
