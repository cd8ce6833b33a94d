#include "runtime/train/cache_agreement.h"

#include <vector>

#include "common/error.h"
#include "common/file_util.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* record_file = "cache.json";

// A manifest value as the text Config::set takes (what a YAML file or --set would hold).
std::string setting_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  return value.dump();
}

// 8000 and 8000.0 are one value: the manifest keeps numbers as prep's config typed them.
bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// "n_mels 64, vocabulary chars-v1 of 87 symbols": what a record says the model is built for.
std::string describe_record(const json& record) {
  std::string text = "fingerprint " + record.value("fingerprint", std::string("?"));
  if (record.contains("n_mels")) text += ", n_mels " + record["n_mels"].dump();
  if (record.contains("vocabulary")) {
    const json& vocabulary = record["vocabulary"];
    text += ", vocabulary " + vocabulary.value("version", std::string("?")) + " of " +
            vocabulary.value("size", json(0)).dump() + " symbols";
  }
  return text;
}

}  // namespace

config::Config agree_with_cache(const config::Config& given, const json& manifest, const fs::path& cache_dir) {
  vocabulary_size(manifest, cache_dir);  // the model is built from it: fail here, not in the model rank
  config::Config agreed = given;
  json settings = manifest.value("settings", json::object());
  if (!settings.is_object()) return agreed;
  // A float32 cache's settings leave cache.mel_dtype out (runtime/settings.cpp, output_settings),
  // so that its fingerprint is what it was before the key existed; the manifest says which.
  if (settings.contains("cache") && settings["cache"].is_object() && !settings["cache"].contains("mel_dtype")) {
    settings["cache"]["mel_dtype"] = manifest.value("mel_dtype", std::string("float32"));
  }
  const json current = given.to_json();
  const std::string origin = "cache " + (cache_dir / "manifest.json").string();
  std::vector<std::string> disagreements;
  for (const auto& [section, values] : settings.items()) {
    if (!values.is_object() || !current.contains(section)) continue;
    for (const auto& [name, cached] : values.items()) {
      if (!current[section].contains(name)) continue;  // recorded by prep, not a setting (corpus.layout)
      const std::string key = section + "." + name;
      const json& value = current[section][name];
      if (given.origin(key) == "default") {
        agreed.set(key, setting_text(cached), origin);  // so the run's yaml says where it came from
      } else if (!same_value(value, cached)) {
        disagreements.push_back("  " + key + ": " + value.dump() + " (" + given.origin(key) +
                                ") but the cache was prepared with " + cached.dump());
      }
    }
  }
  if (disagreements.empty()) return agreed;
  std::string message = "settings disagree with the cache in " + cache_dir.string() + " (" +
                        (cache_dir / "manifest.json").string() + " records what `sluice prep` made it with):\n";
  for (const std::string& line : disagreements) message += line + "\n";
  message +=
      "train uses the features and token ids on disk as they are: drop these settings from the config and "
      "--set (train takes them from the cache), or run `sluice prep` with them into a new cache directory "
      "(--out NEW_DIR) and train on that (--cache NEW_DIR)";
  throw ConfigError(message);
}

int vocabulary_size(const json& manifest, const fs::path& cache_dir) {
  const auto vocabulary = manifest.find("vocabulary");
  if (vocabulary == manifest.end() || !vocabulary->is_object() || !vocabulary->contains("symbols") ||
      !(*vocabulary)["symbols"].is_array() || (*vocabulary)["symbols"].empty()) {
    throw CacheError((cache_dir / "manifest.json").string() +
                     " has no vocabulary.symbols list, which sizes the model's token embedding; the manifest "
                     "is damaged or was not written by `sluice prep`: run `sluice cache verify " +
                     cache_dir.string() + "` and rebuild the cache with `sluice prep`");
  }
  return static_cast<int>((*vocabulary)["symbols"].size());
}

json cache_record(const json& manifest, const fs::path& cache_dir) {
  json record = {{"dir", fs::absolute(cache_dir).lexically_normal().string()},
                 {"fingerprint", manifest.value("fingerprint", std::string())},
                 {"created", manifest.value("created", std::string())}};
  const json settings = manifest.value("settings", json::object());
  if (settings.is_object() && settings.contains("features") && settings["features"].contains("n_mels")) {
    record["n_mels"] = settings["features"]["n_mels"];
  }
  const json vocabulary = manifest.value("vocabulary", json::object());
  if (vocabulary.is_object() && vocabulary.contains("symbols") && vocabulary["symbols"].is_array()) {
    record["vocabulary"] = {{"version", vocabulary.value("version", std::string())},
                            {"size", vocabulary["symbols"].size()}};
  }
  if (manifest.contains("mixture")) {  // CacheReader::open_mixture(): every cache of train.mixture
    record["mixture"] = json::array();
    for (const json& corpus : manifest["mixture"]) {
      record["mixture"].push_back({{"dir", fs::absolute(corpus.value("dir", std::string())).lexically_normal().string()},
                                   {"fingerprint", corpus.value("fingerprint", std::string())},
                                   {"samples", corpus.value("samples", json(0))}});
    }
  }
  return record;
}

void check_resumed_cache(const fs::path& run_dir, const json& record) {
  const fs::path file = run_dir / record_file;
  if (!fs::exists(file)) return;  // a run directory from before cache.json
  json trained;
  try {
    trained = json::parse(read_file(file));
  } catch (const json::exception& error) {
    throw ConfigError("--resume: " + file.string() + " is not JSON (" + error.what() +
                      "); restore it, or start a new run in another --run-dir");
  }
  // A mixture is its caches (by fingerprint) and their weights, in order; a changed one would
  // train other samples from the checkpoint's position on.
  const auto mixture_of = [](const json& r) {
    json kept = json::array();
    for (const json& corpus : r.value("mixture", json::array())) {
      kept.push_back({corpus.value("fingerprint", std::string()), corpus.value("weight", json(1.0))});
    }
    return kept;
  };
  const auto describe_mixture = [](const json& r) {
    if (!r.contains("mixture")) return "the one cache " + r.value("dir", std::string("?"));
    std::string text = "train.mixture \"";
    for (const json& corpus : r["mixture"]) {
      text += (text.back() == '"' ? "" : ", ") + corpus.value("dir", std::string("?")) + ":" +
              corpus.value("weight", json(1.0)).dump();
    }
    return text + "\" (temperature " + r.value("mixture_temperature", json(1.0)).dump() + " over each " +
           r.value("mixture_temperature_over", std::string("corpus")) + ")";
  };
  if (mixture_of(trained) != mixture_of(record) ||
      trained.value("mixture_temperature", json(1.0)) != record.value("mixture_temperature", json(1.0)) ||
      trained.value("mixture_temperature_over", std::string("corpus")) !=
          record.value("mixture_temperature_over", std::string("corpus"))) {
    throw ConfigError("--resume: the run in " + run_dir.string() + " trained on " + describe_mixture(trained) +
                      " (recorded in " + file.string() + "), but this run would train on " + describe_mixture(record) +
                      ": the checkpoint's position names samples of that mixture. Resume with the same train.mixture "
                      "(caches, order, weights and temperature), or start a new run in another --run-dir");
  }
  if (trained.value("fingerprint", std::string()) == record.value("fingerprint", std::string())) return;
  throw ConfigError("--resume: the run in " + run_dir.string() + " trained on the cache in " +
                    trained.value("dir", std::string("?")) + " (" + describe_record(trained) +
                    ", recorded in " + file.string() + "), but this cache in " + record["dir"].get<std::string>() +
                    " has " + describe_record(record) +
                    ": the checkpoint's model was built for the other cache. Resume with --cache " +
                    trained.value("dir", std::string("?")) + ", or start a new run in another --run-dir");
}

void write_cache_record(const fs::path& run_dir, const json& record) {
  fs::create_directories(run_dir);
  write_file_atomically(run_dir / record_file, record.dump(2) + "\n");
}

}  // namespace sluice::runtime
