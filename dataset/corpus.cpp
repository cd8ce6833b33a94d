#include "dataset/corpus.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/printable.h"
#include "dataset/corpus_support.h"
#include "dataset/language.h"

namespace sluice::dataset {
namespace corpus_detail {

namespace fs = std::filesystem;

bool is_blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n") == std::string::npos;
}

namespace {
void remove_bom(std::string& text) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
}
}  // namespace

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError("cannot read " + file.string() + ": check that it exists and is readable");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lines.empty()) remove_bom(line);
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string read_transcript(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError("cannot read transcript " + file.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  remove_bom(text);
  std::replace(text.begin(), text.end(), '\r', ' ');
  std::replace(text.begin(), text.end(), '\n', ' ');
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

std::vector<std::string> split(const std::string& line, char separator) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    const size_t at = line.find(separator, start);
    fields.push_back(line.substr(start, at - start));
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return fields;
}

std::vector<fs::path> sorted_subfolders(const fs::path& folder) {
  std::vector<fs::path> folders;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    if (entry.is_directory()) folders.push_back(entry.path());
  }
  std::sort(folders.begin(), folders.end());
  return folders;
}

const std::vector<std::string> kAudioExtensions = {".wav", ".flac", ".ogg", ".opus", ".mp3"};

namespace {
std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}
size_t extension_rank(const fs::path& file) {
  const auto at = std::find(kAudioExtensions.begin(), kAudioExtensions.end(),
                            lowercase(file.extension().string()));
  return static_cast<size_t>(at - kAudioExtensions.begin());
}
}  // namespace

AudioFolder::AudioFolder(const fs::path& folder) : folder_(folder) {
  std::error_code ec;
  fs::directory_iterator entries(folder, ec);
  // A folder that is not there leaves every row's audio missing (missing_audio, each named); one
  // the machine refuses to list (no permission) is the machine's problem, said once: it read as
  // missing_audio for every row, and a too-many-rejects exit 3, once.
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw_file_error(ec.value(), "list the audio folder", folder.string(), ErrorKind::data);
  }
  for (const auto& entry : entries) {
    // A link is taken without following it (a stat per file, which on shared storage is a round
    // trip each): the probe opens it anyway and rejects a dangling one as missing_audio.
    if (extension_rank(entry.path()) == kAudioExtensions.size()) continue;  // before any stat
    if (!entry.is_symlink() && !entry.is_regular_file()) continue;
    by_stem_[entry.path().stem().string()].push_back(entry.path());
  }
  for (auto& [stem, files] : by_stem_) {
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
      return std::make_pair(extension_rank(a), a) < std::make_pair(extension_rank(b), b);
    });
  }
}

fs::path AudioFolder::find(const std::string& stem, std::string* note) const {
  const auto it = by_stem_.find(stem);
  if (it == by_stem_.end()) return {};
  if (note != nullptr && it->second.size() > 1) {
    *note = "id '" + stem + "': took " + it->second.front().filename().string() + ", not";
    for (size_t i = 1; i < it->second.size(); ++i) *note += " " + it->second[i].filename().string();
    *note += " (in " + folder_.string() + "; lossless formats are taken first)";
  }
  return it->second.front().lexically_normal();
}

std::vector<std::string> AudioFolder::stems() const {
  std::vector<std::string> stems;
  for (const auto& entry : by_stem_) stems.push_back(entry.first);
  return stems;
}

std::string AudioFolder::looked_for(const std::string& stem) const {
  std::string names;
  for (const auto& extension : kAudioExtensions) names += (names.empty() ? "" : ",") + extension.substr(1);
  return (folder_ / stem).string() + ".{" + names + "}";
}

void reject(CorpusItem& item, RejectReason reason, std::string detail) {
  if (item.reject) return;  // the first problem found is the one reported
  item.reject = reason;
  item.reject_detail = std::move(detail);
}

// Symlinks are followed without judgement: linking wavs/ to shared storage is a deliberate,
// common setup.
bool inside(const fs::path& root, const fs::path& candidate) {
  // The usual case, root/SOME/FILE with no "." or ".." in what follows the root, is decided on the
  // strings: normalising both paths (lexically_normal splits them into components, allocating
  // each) was a fifth of reading a 7,200-row LJSpeech listing.
  const std::string& base = root.native();
  const std::string& path = candidate.native();
  if (!base.empty() && base.back() != '/' && path.size() > base.size() + 1 &&
      path.compare(0, base.size(), base) == 0 && path[base.size()] == '/') {
    bool plain = true;  // no "." or ".." component after the root
    for (size_t at = base.size() + 1; at < path.size() && plain;) {
      const size_t end = std::min(path.find('/', at), path.size());
      const size_t length = end - at;
      plain = !(length == 1 && path[at] == '.') && !(length == 2 && path[at] == '.' && path[at + 1] == '.');
      at = end + 1;
    }
    if (plain) return true;
  }
  const fs::path relative = candidate.lexically_normal().lexically_relative(root.lexically_normal());
  return !relative.empty() && *relative.begin() != "..";
}

void ItemChecker::check(CorpusItem& item) {
  if (item.reject) return;
  if (item.id.empty()) return reject(item, RejectReason::malformed_row, "empty id");
  if (!inside(root_, item.audio)) {
    return reject(item, RejectReason::path_escapes_root,
                  "audio path " + item.audio.string() + " is outside the corpus root " + root_.string());
  }
  auto [previous, inserted] = first_seen_.emplace(item.id, item.source);
  if (!inserted) {
    return reject(item, RejectReason::duplicate_id,
                  "id '" + item.id + "' was first used at " + previous->second);
  }
  if (is_blank(item.text)) reject(item, RejectReason::empty_text, "the text is empty");
}

std::string relative_name(const fs::path& path, const fs::path& root) {
  const fs::path relative = path.lexically_relative(root);
  return relative.empty() ? path.string() : relative.string();
}

}  // namespace corpus_detail

namespace {

namespace fs = std::filesystem;
using namespace corpus_detail;

// Builds one LJSpeech item from a metadata.csv row.
CorpusItem ljspeech_item(const std::string& line, const fs::path& root, const AudioFolder& wavs,
                         const CorpusOptions& options, std::vector<std::string>& notes) {
  CorpusItem item;
  item.speaker = options.speaker;
  item.language = options.language;
  const auto fields = split(line, '|');
  if (fields.size() < 2 || fields.size() > 3) {
    item.text = line;
    reject(item, RejectReason::malformed_row,
           "expected `id|text|normalized_text`, found " + std::to_string(fields.size()) + " field(s)");
    return item;
  }
  item.id = fields[0];
  const bool use_normalized =
      options.text_column == "normalized" && fields.size() == 3 && !is_blank(fields[2]);
  item.text = use_normalized ? fields[2] : fields[1];
  std::string note;
  item.audio = wavs.find(item.id, &note);
  if (!note.empty()) notes.push_back(note);
  if (item.audio.empty()) {
    item.audio = (root / "wavs" / (item.id + ".wav")).lexically_normal();
    // An id that leaves the root is reported as such by the checker, not as missing audio.
    if (inside(root, item.audio)) {
      reject(item, RejectReason::missing_audio, "no audio file " + wavs.looked_for(item.id));
    }
  }
  return item;
}

CorpusListing read_ljspeech(const fs::path& root, const CorpusOptions& options) {
  CorpusListing listing{root, root / "metadata.csv", "ljspeech", "", {}, {}};
  const AudioFolder wavs(root / "wavs");
  ItemChecker checker(root);
  const auto lines = read_lines(listing.listing_file);
  listing.items.reserve(lines.size());  // one row a line: no copies of the items as it grows
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    CorpusItem item = ljspeech_item(lines[i], root, wavs, options, listing.notes);
    item.source = "metadata.csv:" + std::to_string(i + 1);
    checker.check(item);
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

CorpusItem jsonl_item(const std::string& line, const fs::path& root, const CorpusOptions& options) {
  CorpusItem item;
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
    item.id.clear();
    item.text = line;
    reject(item, RejectReason::malformed_row, error.what());
  }
  return item;
}

CorpusListing read_jsonl(const fs::path& manifest, const CorpusOptions& options) {
  const fs::path root = fs::weakly_canonical(manifest).parent_path();
  CorpusListing listing{root, manifest, "jsonl", "", {}, {}};
  ItemChecker checker(root);
  const std::string name = manifest.filename().string();
  const auto lines = read_lines(manifest);
  listing.items.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    CorpusItem item = jsonl_item(lines[i], root, options);
    item.source = name + ":" + std::to_string(i + 1);
    checker.check(item);
    listing.items.push_back(std::move(item));
  }
  return listing;
}

// The format `auto` picks for `path`, with what it found; throws when nothing fits.
std::pair<std::string, std::string> recognise(const fs::path& path, const CorpusOptions& options) {
  if (fs::is_regular_file(path)) {
    if (path.extension() == ".jsonl") return {"jsonl", "a .jsonl manifest"};
    if (path.extension() == ".tsv") return {"commonvoice", "a Common Voice .tsv file"};
  } else if (fs::is_directory(path)) {
    if (fs::exists(path / "metadata.csv")) return {"ljspeech", "metadata.csv (LJSpeech)"};
    if (auto found = recognise_commonvoice(path, options); !found.empty()) return {"commonvoice", found};
    if (auto found = recognise_vctk(path); !found.empty()) return {"vctk", found};
    if (auto found = recognise_libritts(path); !found.empty()) return {"libritts", found};
  }
  throw DataError("cannot tell the format of corpus " + path.string() +
                  ": expected a folder with metadata.csv (LJSpeech), " + options.split +
                  " and clips/ (Common Voice), wav48_silence_trimmed/ and txt/ (VCTK), "
                  "SPEAKER/CHAPTER/*.normalized.txt (LibriTTS), a .jsonl manifest or a Common Voice "
                  ".tsv; set corpus.format to read it as one of these");
}

// Persian written without Persian-only letters reads as Arabic on its own (dataset/language.h);
// in a corpus whose Arabic-script rows are Persian it is Persian.
void resolve_arabic_script_rows(CorpusListing& listing) {
  int64_t persian = 0, arabic = 0;
  for (const auto& item : listing.items) {
    if (!item.language.empty() || item.reject) continue;
    const std::string strict = detect_language(item.text, "");
    persian += strict == "fa";
    arabic += strict == "ar";
  }
  if (persian == 0 || persian < arabic) return;
  int64_t resolved = 0;
  std::string example;
  for (auto& item : listing.items) {
    if (!item.language.empty() || item.reject) continue;
    if (detect_language(item.text, "") != "") continue;
    if (detect_language(item.text, "ar") != "ar") continue;  // not Arabic script at all
    item.language = "fa";
    if (resolved++ == 0) example = item.source;
  }
  if (resolved > 0) {
    listing.notes.push_back(std::to_string(resolved) +
                            " Arabic-script row(s) with no letter that tells Persian from Arabic read as "
                            "fa, as the corpus's other " + std::to_string(persian) +
                            " Arabic-script row(s) are Persian (first: " + example +
                            "); set corpus.language to decide otherwise");
  }
}

CorpusListing read_format(const fs::path& path, const std::string& format, const CorpusOptions& options) {
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
  if (format == "libritts") return read_libritts(fs::weakly_canonical(path), options);
  if (format == "vctk") return read_vctk(fs::weakly_canonical(path), options);
  if (format == "commonvoice") {
    const fs::path tsv = fs::is_directory(path) ? path / options.split : path;
    return read_commonvoice(fs::weakly_canonical(tsv), options);
  }
  std::string known;
  for (const auto& name : corpus_formats()) known += ", " + name;
  throw ConfigError("corpus.format '" + format + "' is not one of auto" + known);
}

}  // namespace

const std::vector<std::string>& corpus_formats() {
  static const std::vector<std::string> formats = {"ljspeech", "jsonl", "libritts", "vctk", "commonvoice"};
  return formats;
}

CorpusListing read_corpus(const fs::path& path, const CorpusOptions& options) {
  if (!fs::exists(path)) {
    throw DataError("corpus " + path.string() +
                    " does not exist: set corpus.path to a corpus folder (LJSpeech, LibriTTS, VCTK, "
                    "Common Voice) or a .jsonl manifest");
  }
  std::string format = options.format;
  std::string recognised = "set by corpus.format";
  if (format == "auto") std::tie(format, recognised) = recognise(path, options);
  if (!options.language.empty() && !is_language_code(options.language)) {
    throw ConfigError("corpus.language '" + printable(options.language) +
                      "' is not a language code: use an ISO 639 code such as en or fa, with a region if you like (pt-BR)");
  }
  CorpusListing listing = read_format(path, format, options);
  listing.recognised = recognised;
  for (auto& item : listing.items) {
    if (!item.language.empty() && !is_language_code(item.language)) {
      reject(item, RejectReason::malformed_row,
             "language '" + printable(text_excerpt(item.language, 40)) +
                 "' is not a language code (an ISO 639 code such as en or fa, with a region if you like: pt-BR)");
    }
  }
  resolve_arabic_script_rows(listing);
  return listing;
}

std::string text_excerpt(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is cut in half.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

}  // namespace sluice::dataset
