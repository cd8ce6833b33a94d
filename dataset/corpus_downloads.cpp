// Readers of corpora in the layout they are downloaded in: LibriTTS, VCTK, Common Voice
// (dataset/corpus.h describes each layout).
#include <algorithm>
#include <regex>
#include <set>

#include "common/error.h"
#include "dataset/corpus_support.h"

namespace sluice::dataset::corpus_detail {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ------------------------------------------------------------------------------------ LibriTTS

// A row of a chapter's SPEAKER_CHAPTER.trans.tsv: `id<TAB>original<TAB>normalized`.
struct TranscriptRow {
  std::string source;
  std::string line;
  std::vector<std::string> fields;
};

// The folders holding LibriTTS transcripts (ID.normalized.txt, ID.original.txt or *.trans.tsv),
// sorted. `limit` stops the walk after that many (recognition needs one).
std::vector<fs::path> libritts_chapters(const fs::path& root, size_t limit = SIZE_MAX) {
  std::set<fs::path> chapters;
  std::error_code ec;
  // root[/SUBSET]/SPEAKER/CHAPTER/file: files lie at most four levels down.
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink, ec);
       it != fs::recursive_directory_iterator() && chapters.size() < limit; it.increment(ec)) {
    if (ec) break;
    if (it.depth() >= 3) it.disable_recursion_pending();
    const std::string name = it->path().filename().string();
    if (ends_with(name, ".normalized.txt") || ends_with(name, ".original.txt") || ends_with(name, ".trans.tsv")) {
      chapters.insert(it->path().parent_path());
    }
  }
  return {chapters.begin(), chapters.end()};
}

std::map<std::string, TranscriptRow> read_trans_tsv(const fs::path& chapter, const fs::path& root) {
  std::map<std::string, TranscriptRow> rows;
  for (const auto& entry : fs::directory_iterator(chapter)) {
    const std::string name = entry.path().filename().string();
    if (!ends_with(name, ".trans.tsv")) continue;
    const auto lines = read_lines(entry.path());
    for (size_t i = 0; i < lines.size(); ++i) {
      if (is_blank(lines[i])) continue;
      TranscriptRow row{relative_name(entry.path(), root) + ":" + std::to_string(i + 1), lines[i],
                        split(lines[i], '\t')};
      rows.emplace(row.fields[0], std::move(row));  // a repeated id: the checker never sees it twice
    }
  }
  return rows;
}

// The stems of ID.normalized.txt / ID.original.txt in a chapter folder.
std::set<std::string> transcript_stems(const fs::path& chapter) {
  std::set<std::string> stems;
  for (const auto& entry : fs::directory_iterator(chapter)) {
    const std::string name = entry.path().filename().string();
    for (const char* suffix : {".normalized.txt", ".original.txt"}) {
      if (ends_with(name, suffix)) stems.insert(name.substr(0, name.size() - std::string(suffix).size()));
    }
  }
  return stems;
}

// Text of one utterance: the trans.tsv row when there is one, else its .txt files. The column or
// file of corpus.text_column comes first; the other is the fallback when it is empty or absent.
void libritts_text(CorpusItem& item, const fs::path& chapter, const fs::path& root,
                   const std::map<std::string, TranscriptRow>& rows, const CorpusOptions& options) {
  const bool normalized = options.text_column == "normalized";
  if (const auto row = rows.find(item.id); row != rows.end()) {
    item.source = row->second.source;
    const auto& fields = row->second.fields;
    if (fields.size() != 3) {
      item.text = row->second.line;
      return reject(item, RejectReason::malformed_row,
                    "expected `id<TAB>original<TAB>normalized`, found " + std::to_string(fields.size()) +
                        " field(s)");
    }
    item.text = normalized && !is_blank(fields[2]) ? fields[2] : fields[1];
    if (is_blank(item.text)) item.text = fields[2];
    return;
  }
  const fs::path preferred = chapter / (item.id + (normalized ? ".normalized.txt" : ".original.txt"));
  const fs::path other = chapter / (item.id + (normalized ? ".original.txt" : ".normalized.txt"));
  for (const auto& file : {preferred, other}) {
    if (!fs::exists(file)) continue;
    item.source = relative_name(file, root);
    item.text = read_transcript(file);
    if (!is_blank(item.text)) return;
  }
  if (item.source.empty()) {
    reject(item, RejectReason::missing_text,
           "no transcript: neither " + relative_name(preferred, root) + " nor " +
               relative_name(other, root) + " nor a row of a .trans.tsv in its folder");
  }
}

void read_libritts_chapter(const fs::path& chapter, const fs::path& root, const CorpusOptions& options,
                           ItemChecker& checker, CorpusListing& listing) {
  const AudioFolder audio(chapter);
  const auto rows = read_trans_tsv(chapter, root);
  std::set<std::string> ids = transcript_stems(chapter);
  for (const auto& [id, row] : rows) ids.insert(id);
  for (const auto& stem : audio.stems()) ids.insert(stem);
  for (const auto& id : ids) {
    CorpusItem item;
    item.id = id;
    item.speaker = chapter.parent_path().filename().string();
    item.metadata["chapter"] = chapter.filename().string();
    item.language = "en";
    std::string note;
    item.audio = audio.find(id, &note);
    if (!note.empty()) listing.notes.push_back(note);
    libritts_text(item, chapter, root, rows, options);
    if (item.audio.empty()) {
      item.audio = (chapter / (id + ".wav")).lexically_normal();
      reject(item, RejectReason::missing_audio, "no audio file " + audio.looked_for(id));
    }
    if (item.source.empty()) item.source = relative_name(item.audio, root);
    checker.check(item);
    listing.items.push_back(std::move(item));
  }
}

// ---------------------------------------------------------------------------------------- VCTK

fs::path vctk_audio_folder(const fs::path& root) {
  return fs::is_directory(root / "wav48_silence_trimmed") ? root / "wav48_silence_trimmed" : root / "wav48";
}

// Utterance id -> audio file of one speaker. 0.92 names files pNNN_NNN_mic1.flac: only the
// chosen microphone's are taken. 0.80 names them pNNN_NNN.wav.
std::map<std::string, fs::path> vctk_speaker_audio(const fs::path& folder, const std::string& mic,
                                                   std::vector<std::string>& notes) {
  const AudioFolder audio(folder);
  std::map<std::string, fs::path> by_id;
  for (const auto& stem : audio.stems()) {
    std::string id = stem;
    const size_t underscore = stem.rfind('_');
    if (underscore != std::string::npos && stem.compare(underscore + 1, 3, "mic") == 0) {
      if (stem.substr(underscore + 1) != mic) continue;
      id = stem.substr(0, underscore);
    }
    std::string note;
    by_id[id] = audio.find(stem, &note);
    if (!note.empty()) notes.push_back(note);
  }
  return by_id;
}

void read_vctk_speaker(const std::string& speaker, const fs::path& root, const CorpusOptions& options,
                       ItemChecker& checker, CorpusListing& listing) {
  const fs::path audio_folder = vctk_audio_folder(root) / speaker;
  const auto audio = vctk_speaker_audio(audio_folder, options.vctk_mic, listing.notes);
  std::set<std::string> ids;
  for (const auto& [id, file] : audio) ids.insert(id);
  // The ids whose txt/SPEAKER/ID.txt exists, from the folder's listing: an entry's type comes
  // with it (d_type), so only a link (or a file system that gives no type) costs a stat, where
  // asking fs::exists of each transcript cost two per utterance (44,000 transcripts: 88,000 stats
  // on rank 0, against a shared file system's metadata server).
  std::set<std::string> with_transcript;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "txt" / speaker, ec)) {
    if (entry.path().extension() != ".txt") continue;
    std::string id = entry.path().stem().string();
    ids.insert(id);
    if (entry.exists()) with_transcript.insert(std::move(id));  // a dangling link is none, as before
  }
  for (const auto& id : ids) {
    CorpusItem item;
    item.id = id;
    item.speaker = speaker;
    item.language = "en";
    const fs::path transcript = root / "txt" / speaker / (id + ".txt");
    const bool has_transcript = with_transcript.count(id) > 0;
    const auto found = audio.find(id);
    item.audio = found != audio.end() ? found->second
                                      : (audio_folder / (id + "_" + options.vctk_mic + ".flac")).lexically_normal();
    item.source = relative_name(has_transcript ? transcript : item.audio, root);
    if (has_transcript) {
      item.text = read_transcript(transcript);
    } else {
      reject(item, RejectReason::missing_text, "no transcript " + relative_name(transcript, root));
    }
    if (found == audio.end()) {
      reject(item, RejectReason::missing_audio,
             "no audio for " + options.vctk_mic + " in " + relative_name(audio_folder, root));
    }
    checker.check(item);
    listing.items.push_back(std::move(item));
  }
}

// --------------------------------------------------------------------------------- Common Voice

// One TSV field: a field written with CSV quoting ("a ""b"" c") is unquoted; any other field,
// including one with a stray quote (Common Voice writes most sentences unquoted), is kept as is.
std::string unquote(const std::string& field) {
  if (field.size() < 2 || field.front() != '"' || field.back() != '"') return field;
  std::string out;
  for (size_t i = 1; i + 1 < field.size(); ++i) {
    if (field[i] == '"') {
      if (i + 2 < field.size() && field[i + 1] == '"') {
        out += '"';
        ++i;
        continue;
      }
      return field;  // a lone quote inside: not a quoted field
    }
    out += field[i];
  }
  return out;
}

// The corpus folder's name when it looks like a Common Voice locale (fa, en, zh-CN, rm-sursilv).
std::string locale_of_folder(const fs::path& folder) {
  static const std::regex locale("[a-z]{2,3}(-[A-Za-z0-9]{2,8})?");
  const std::string name = folder.filename().string();
  return std::regex_match(name, locale) ? name : "";
}

struct CommonVoiceColumns {
  int path = -1, sentence = -1, client_id = -1, locale = -1, up_votes = -1, down_votes = -1;
  size_t count = 0;
};

CommonVoiceColumns commonvoice_columns(const std::string& header, const fs::path& tsv) {
  const auto names = split(header, '\t');
  CommonVoiceColumns columns;
  columns.count = names.size();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name = unquote(names[i]);
    const int at = static_cast<int>(i);
    if (name == "path") columns.path = at;
    if (name == "sentence") columns.sentence = at;
    if (name == "client_id") columns.client_id = at;
    if (name == "locale") columns.locale = at;
    if (name == "up_votes") columns.up_votes = at;
    if (name == "down_votes") columns.down_votes = at;
  }
  if (columns.path < 0 || columns.sentence < 0) {
    throw DataError(tsv.string() + ":1: the header has no `path` and `sentence` columns (found: " + header +
                    "); a Common Voice TSV such as validated.tsv was expected");
  }
  return columns;
}

CorpusItem commonvoice_item(const std::string& line, const CommonVoiceColumns& columns, const fs::path& root,
                            const std::string& folder_language, const CorpusOptions& options) {
  CorpusItem item;
  auto fields = split(line, '\t');
  if (fields.size() != columns.count) {
    item.text = line;
    reject(item, RejectReason::malformed_row,
           "expected " + std::to_string(columns.count) + " tab-separated fields as in the header, found " +
               std::to_string(fields.size()));
    return item;
  }
  for (auto& field : fields) field = unquote(field);
  const auto field = [&](int column) { return column >= 0 ? fields[static_cast<size_t>(column)] : std::string(); };
  const fs::path clip = field(columns.path);
  item.id = clip.stem().string();
  item.audio = (root / "clips" / clip).lexically_normal();
  item.text = field(columns.sentence);
  item.speaker = columns.client_id >= 0 ? field(columns.client_id) : options.speaker;
  item.language = !field(columns.locale).empty() ? field(columns.locale)
                  : !folder_language.empty()     ? folder_language
                                                 : options.language;
  for (const auto& [name, column] : {std::pair{"up_votes", columns.up_votes}, {"down_votes", columns.down_votes}}) {
    if (!field(column).empty()) item.metadata[name] = field(column);
  }
  return item;
}

}  // namespace

CorpusListing read_libritts(const fs::path& root, const CorpusOptions& options) {
  const auto chapters = libritts_chapters(root);
  if (chapters.empty()) {
    throw DataError("corpus " + root.string() + " has no LibriTTS transcripts (SPEAKER/CHAPTER/ID.normalized.txt "
                    "or SPEAKER_CHAPTER.trans.tsv) within four folder levels");
  }
  CorpusListing listing{root, root, "libritts", "", {}, {}};
  ItemChecker checker(root);
  for (const auto& chapter : chapters) read_libritts_chapter(chapter, root, options, checker, listing);
  return listing;
}

CorpusListing read_vctk(const fs::path& root, const CorpusOptions& options) {
  if (!fs::is_directory(vctk_audio_folder(root)) || !fs::is_directory(root / "txt")) {
    throw DataError("corpus " + root.string() + " is not a VCTK folder: expected wav48_silence_trimmed/ "
                    "(or wav48/) and txt/");
  }
  CorpusListing listing{root, root / "txt", "vctk", "", {}, {}};
  std::set<std::string> speakers;
  for (const auto& folder : sorted_subfolders(vctk_audio_folder(root))) speakers.insert(folder.filename().string());
  for (const auto& folder : sorted_subfolders(root / "txt")) speakers.insert(folder.filename().string());
  ItemChecker checker(root);
  for (const auto& speaker : speakers) read_vctk_speaker(speaker, root, options, checker, listing);
  return listing;
}

CorpusListing read_commonvoice(const fs::path& tsv, const CorpusOptions& options) {
  if (!fs::is_regular_file(tsv)) {
    throw DataError("Common Voice split " + tsv.string() + " does not exist: set corpus.split to one of the "
                    "corpus's .tsv files (validated.tsv, train.tsv, ...) or corpus.path to the file");
  }
  const fs::path root = tsv.parent_path();
  CorpusListing listing{root, tsv, "commonvoice", "", {}, {}};
  const auto lines = read_lines(tsv);
  if (lines.empty()) throw DataError(tsv.string() + " is empty: a Common Voice TSV starts with a header row");
  const auto columns = commonvoice_columns(lines[0], tsv);
  const std::string folder_language = locale_of_folder(root);
  const std::string name = tsv.filename().string();
  ItemChecker checker(root);
  for (size_t i = 1; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    CorpusItem item = commonvoice_item(lines[i], columns, root, folder_language, options);
    item.source = name + ":" + std::to_string(i + 1);
    checker.check(item);
    listing.items.push_back(std::move(item));
  }
  return listing;
}

std::string recognise_libritts(const fs::path& folder) {
  const auto chapters = libritts_chapters(folder, 1);
  if (chapters.empty()) return "";
  return "LibriTTS transcripts in " + relative_name(chapters[0], folder) + "/";
}

std::string recognise_vctk(const fs::path& folder) {
  if (!fs::is_directory(folder / "txt")) return "";
  if (fs::is_directory(folder / "wav48_silence_trimmed")) return "wav48_silence_trimmed/ and txt/ (VCTK 0.92)";
  if (fs::is_directory(folder / "wav48")) return "wav48/ and txt/ (VCTK 0.80)";
  return "";
}

std::string recognise_commonvoice(const fs::path& folder, const CorpusOptions& options) {
  if (!fs::is_directory(folder / "clips") || !fs::is_regular_file(folder / options.split)) return "";
  return options.split + " and clips/ (Common Voice" +
         (locale_of_folder(folder).empty() ? "" : ", locale " + locale_of_folder(folder)) + ")";
}

}  // namespace sluice::dataset::corpus_detail
