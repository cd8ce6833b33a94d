#include "cache/manifest.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "cache/durable_file.h"
#include "common/error.h"

namespace sluice::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Field access that names the file and the key when the manifest is not what this code wrote.
template <class T>
T field(const json& object, const char* key, const std::string& source, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end()) {
    throw CacheError(source + ": missing key '" + path + key +
                     "'; the manifest is damaged or "
                     "from another tool: rebuild the cache with `sluice prep`");
  }
  try {
    return it->get<T>();
  } catch (const json::exception& error) {
    throw CacheError(source + ": key '" + path + key + "' has the wrong type (" + error.what() +
                     "); rebuild the cache with `sluice prep`");
  }
}

// A file by which `sluice prep` recognises a corpus folder (dataset/corpus.h), when `dir` has one
// and no cache shard: a corpus passed where a cache belongs (train --cache) is then named as such.
// "" otherwise. Only names are looked at, not the corpus's contents.
std::string corpus_file_in(const fs::path& dir) {
  std::error_code error;
  std::string found;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    // A prep's own files: an unfinished cache, for which the usual message fits.
    if (name.rfind("shard-", 0) == 0 || name == "sluice-prep.yaml" || name == "prep.lock" || name == "rejects.jsonl") {
      return "";
    }
    if (found.empty() && (name == "metadata.csv" || name == "validated.tsv" || name == "wav48_silence_trimmed" ||
                          it->path().extension() == ".jsonl")) {
      found = name;
    }
  }
  return found;
}

}  // namespace

json ManifestTotals::to_json() const {
  return {{"samples", samples}, {"frames", frames}, {"tokens", tokens}, {"seconds", seconds}, {"rejects", rejects}};
}

json Manifest::to_json() const {
  json shard_list = json::array();
  for (const ManifestShard& shard : shards) {
    shard_list.push_back({{"file", shard.file},
                          {"shard", shard.shard},
                          {"samples", shard.samples},
                          {"frames", shard.frames},
                          {"tokens", shard.tokens},
                          {"seconds", shard.seconds},
                          {"rejects", shard.rejects},
                          {"bytes", shard.bytes}});
  }
  json out{{"format", format_name},
           {"format_version", format_version},
           {"fingerprint", fingerprint},
           {"created", created},
           {"settings", settings},
           {"vocabulary", vocabulary},
           {"languages", languages},
           {"speakers", speakers},
           {"shards", shard_list},
           {"totals", totals.to_json()},
           {"index", index}};
  if (mel_dtype != "float32") out["mel_dtype"] = mel_dtype;
  if (mel_statistics) {
    out["mel_statistics"] = {{"frames", mel_statistics->frames},
                             {"mean", mel_statistics->mean},
                             {"std", mel_statistics->stddev}};
  }
  return out;
}

Manifest Manifest::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw CacheError(source + " is not a JSON object; rebuild the cache");
  Manifest m;
  const std::string format = field<std::string>(j, "format", source, "");
  if (format != format_name) {
    throw CacheError(source + " has format '" + format + "', expected '" + format_name +
                     "': this is not a sluice cache manifest");
  }
  m.format_version = field<int64_t>(j, "format_version", source, "");
  if (m.format_version < 1 || m.format_version > current_format_version) {
    throw CacheError(source + " has format_version " + std::to_string(m.format_version) +
                     "; this sluice reads versions 1 to " + std::to_string(current_format_version) +
                     ": rebuild the cache with this sluice's `sluice prep`, or use the sluice "
                     "that wrote it");
  }
  m.mel_dtype = j.value("mel_dtype", std::string("float32"));
  if (m.mel_dtype != "float32" && m.mel_dtype != "float16") {
    throw CacheError(source + " has mel_dtype '" + m.mel_dtype + "'; this sluice reads float32 and float16");
  }
  if ((m.mel_dtype == "float16") != (m.format_version == 2)) {
    throw CacheError(source + ": format_version " + std::to_string(m.format_version) + " with mel_dtype " +
                     m.mel_dtype + " (float16 mels are version 2, float32 version 1); the manifest is damaged: "
                     "rebuild the cache");
  }
  m.fingerprint = field<std::string>(j, "fingerprint", source, "");
  m.created = field<std::string>(j, "created", source, "");
  m.settings = j.value("settings", json::object());
  m.vocabulary = j.value("vocabulary", json::object());
  m.languages = field<std::vector<std::string>>(j, "languages", source, "");
  m.speakers = field<std::vector<std::string>>(j, "speakers", source, "");
  const json shards = field<json>(j, "shards", source, "");
  if (!shards.is_array()) throw CacheError(source + ": 'shards' is not a list");
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string at = "shards[" + std::to_string(i) + "].";
    ManifestShard shard;
    shard.file = field<std::string>(shards[i], "file", source, at);
    shard.shard = field<int64_t>(shards[i], "shard", source, at);
    shard.samples = field<int64_t>(shards[i], "samples", source, at);
    shard.frames = field<int64_t>(shards[i], "frames", source, at);
    shard.tokens = field<int64_t>(shards[i], "tokens", source, at);
    shard.seconds = field<double>(shards[i], "seconds", source, at);
    shard.rejects = shards[i].value("rejects", int64_t{0});
    shard.bytes = field<int64_t>(shards[i], "bytes", source, at);
    m.shards.push_back(shard);
  }
  const json totals = field<json>(j, "totals", source, "");
  m.totals.samples = field<int64_t>(totals, "samples", source, "totals.");
  m.totals.frames = field<int64_t>(totals, "frames", source, "totals.");
  m.totals.tokens = field<int64_t>(totals, "tokens", source, "totals.");
  m.totals.seconds = field<double>(totals, "seconds", source, "totals.");
  m.totals.rejects = field<int64_t>(totals, "rejects", source, "totals.");
  m.index = field<std::string>(j, "index", source, "");
  if (auto it = j.find("mel_statistics"); it != j.end()) {
    const std::string at = "mel_statistics.";
    if (!it->is_object()) {
      throw CacheError(source + ": 'mel_statistics' is not an object; rebuild the cache with "
                       "`sluice prep`");
    }
    MelStatistics stats;
    stats.frames = field<int64_t>(*it, "frames", source, at);
    stats.mean = field<std::vector<float>>(*it, "mean", source, at);
    stats.stddev = field<std::vector<float>>(*it, "std", source, at);
    if (stats.frames < 0 || stats.mean.size() != stats.stddev.size()) {
      throw CacheError(source + ": 'mel_statistics' is inconsistent (frames " +
                       std::to_string(stats.frames) + ", " + std::to_string(stats.mean.size()) +
                       " means, " + std::to_string(stats.stddev.size()) +
                       " stds); rebuild the cache with `sluice prep`");
    }
    m.mel_statistics = std::move(stats);
  }
  return m;
}

Manifest Manifest::read(const fs::path& dir) {
  const fs::path path = dir / file_name;
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw CacheError("no cache at " + dir.string() +
                     ": the directory does not exist; build one with `sluice prep -c CONFIG` or "
                     "check the cache path in the config");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (const std::string corpus_file = corpus_file_in(dir); !corpus_file.empty()) {
      throw CacheError("no cache at " + dir.string() + ": it holds a corpus (" + corpus_file +
                       "), not a cache; prepare it first with `sluice prep --corpus " + dir.string() +
                       " --out CACHE_DIR` and pass CACHE_DIR as the cache");
    }
    throw CacheError("no cache at " + dir.string() + ": " + path.filename().string() +
                     " is missing (an unfinished or interrupted prep leaves none); run "
                     "`sluice prep -c CONFIG` to build or complete it");
  }
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& parse) {
    throw CacheError(path.string() + " is not valid JSON (" + parse.what() +
                     "); rebuild the cache with `sluice prep`");
  }
  return from_json(j, path.string());
}

void Manifest::write(const fs::path& dir) const {
  const fs::path path = dir / file_name;
  const fs::path temporary = durable::temporary_name(path);
  durable::write_whole_file(temporary, to_json().dump(2) + "\n");
  try {
    durable::publish(temporary, path);
  } catch (...) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw;
  }
}

std::string iso8601_now() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace sluice::cache
