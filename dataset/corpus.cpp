#include "dataset/corpus.h"

#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace sluice::dataset {
namespace {

namespace fs = std::filesystem;

bool is_blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n") == std::string::npos;
}

// True when `candidate` lies inside `root` by its path alone ("..", absolute paths). Symlinks are
// followed without judgement: linking wavs/ to shared storage is a deliberate, common setup.
bool inside(const fs::path& root, const fs::path& candidate) {
  const fs::path relative = candidate.lexically_normal().lexically_relative(root.lexically_normal());
  return !relative.empty() && *relative.begin() != "..";
}

void reject(CorpusItem& item, RejectReason reason, std::string detail) {
  if (item.reject) return;  // the first problem found is the one reported
  item.reject = reason;
  item.reject_detail = std::move(detail);
}

// Checks that apply to every format once an item's fields are known.
void check_item(CorpusItem& item, const fs::path& root,
                std::unordered_map<std::string, std::string>& first_seen) {
  if (item.reject) return;
  if (item.id.empty()) return reject(item, RejectReason::malformed_row, "empty id");
  if (!inside(root, item.audio)) {
    return reject(item, RejectReason::path_escapes_root,
                  "audio path " + item.audio.string() + " is outside the corpus root " + root.string());
  }
  auto [previous, inserted] = first_seen.emplace(item.id, item.source);
  if (!inserted) {
    return reject(item, RejectReason::duplicate_id,
                  "id '" + item.id + "' was first used at " + previous->second);
  }
  if (is_blank(item.text)) reject(item, RejectReason::empty_text, "the text is empty");
}

std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    size_t bar = line.find('|', start);
    fields.push_back(line.substr(start, bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  return fields;
}

CorpusListing read_ljspeech(const fs::path& root, const CorpusOptions& options) {
  CorpusListing listing{root, root / "metadata.csv", "ljspeech", {}};
  std::ifstream in(listing.listing_file);
  if (!in) throw DataError("cannot read " + listing.listing_file.string());
  std::unordered_map<std::string, std::string> first_seen;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    CorpusItem item;
    item.source = "metadata.csv:" + std::to_string(number);
    item.speaker = options.speaker;
    item.language = options.language;
    const auto fields = split_row(line);
    if (fields.size() < 2 || fields.size() > 3) {
      reject(item, RejectReason::malformed_row,
             "expected `id|text|normalized_text`, found " + std::to_string(fields.size()) +
                 " field(s)");
    } else {
      item.id = fields[0];
      const bool use_normalized = options.text_column == "normalized" && fields.size() == 3 &&
                                  !is_blank(fields[2]);
      item.text = use_normalized ? fields[2] : fields[1];
      item.audio = (root / "wavs" / (item.id + ".wav")).lexically_normal();
    }
    check_item(item, root, first_seen);
    listing.items.push_back(std::move(item));
  }
  return listing;
}

std::string optional_string(const nlohmann::json& object, const char* key, const std::string& fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw std::invalid_argument(std::string("\"") + key + "\" must be a string");
  return it->get<std::string>();
}

CorpusListing read_jsonl(const fs::path& manifest, const CorpusOptions& options) {
  const fs::path root = fs::weakly_canonical(manifest).parent_path();
  CorpusListing listing{root, manifest, "jsonl", {}};
  std::ifstream in(manifest);
  if (!in) throw DataError("cannot read " + manifest.string());
  std::unordered_map<std::string, std::string> first_seen;
  std::string line;
  const std::string name = manifest.filename().string();
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (is_blank(line)) continue;
    CorpusItem item;
    item.source = name + ":" + std::to_string(number);
    try {
      const auto object = nlohmann::json::parse(line);
      if (!object.is_object()) throw std::invalid_argument("the line is not a JSON object");
      for (const char* required : {"id", "audio", "text"}) {
        if (!object.contains(required) || !object[required].is_string()) {
          throw std::invalid_argument(std::string("missing string field \"") + required + "\"");
        }
      }
      item.id = object["id"].get<std::string>();
      item.text = object["text"].get<std::string>();
      const fs::path audio = object["audio"].get<std::string>();
      item.audio = audio.is_absolute() ? audio.lexically_normal() : (root / audio).lexically_normal();
      item.speaker = optional_string(object, "speaker", options.speaker);
      item.language = optional_string(object, "language", options.language);
    } catch (const std::exception& error) {
      reject(item, RejectReason::malformed_row, error.what());
    }
    check_item(item, root, first_seen);
    listing.items.push_back(std::move(item));
  }
  return listing;
}

}  // namespace

CorpusListing read_corpus(const fs::path& path, const CorpusOptions& options) {
  if (!fs::exists(path)) {
    throw DataError("corpus " + path.string() +
                    " does not exist: set corpus.path to an LJSpeech folder (with metadata.csv) "
                    "or a .jsonl manifest");
  }
  std::string format = options.format;
  if (format == "auto") {
    if (fs::is_directory(path) && fs::exists(path / "metadata.csv")) {
      format = "ljspeech";
    } else if (fs::is_regular_file(path) && path.extension() == ".jsonl") {
      format = "jsonl";
    } else {
      throw DataError("cannot tell the format of corpus " + path.string() +
                      ": expected a folder with metadata.csv (LJSpeech) or a .jsonl manifest; "
                      "set corpus.format");
    }
  }
  if (format == "ljspeech") {
    if (!fs::is_directory(path) || !fs::exists(path / "metadata.csv")) {
      throw DataError("corpus " + path.string() + " has no metadata.csv (LJSpeech layout expected)");
    }
    return read_ljspeech(fs::weakly_canonical(path), options);
  }
  if (format == "jsonl") {
    if (!fs::is_regular_file(path)) {
      throw DataError("corpus " + path.string() + " is not a file (a .jsonl manifest was expected)");
    }
    return read_jsonl(path, options);
  }
  throw ConfigError("corpus.format '" + format + "' is not one of auto, ljspeech, jsonl");
}

}  // namespace sluice::dataset
