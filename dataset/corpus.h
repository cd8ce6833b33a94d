#pragma once
// Corpus readers: turn a corpus on disk, as it was downloaded, into a list of items in a fixed
// order (file order, folders and files sorted by name). Reading the listing touches no audio.
//
// Formats (corpus.format; `auto` recognises each by the files named here):
//   ljspeech     ROOT/metadata.csv with rows `id|text|normalized_text`, audio in ROOT/wavs/ID.EXT
//                (EXT: wav, flac, ogg, opus, mp3; several files for one id: the first in that
//                order is taken and the listing's notes say so).
//   jsonl        a manifest file, one JSON object per line: {"id", "audio" (relative to the
//                manifest's folder), "text", optional "speaker", "language"}.
//   libritts     LibriTTS / LibriTTS-R: ROOT[/SUBSET]/SPEAKER/CHAPTER/ID.wav with ID.normalized.txt
//                and ID.original.txt, or the chapter's SPEAKER_CHAPTER.trans.tsv
//                (`id<TAB>original<TAB>normalized`) where present. Speaker and chapter come from
//                the path; language "en".
//   vctk         VCTK 0.92: ROOT/wav48_silence_trimmed/pNNN/pNNN_NNN_MIC.flac (MIC from
//                corpus.vctk_mic) and ROOT/txt/pNNN/pNNN_NNN.txt (VCTK 0.80's wav48/pNNN/pNNN_NNN.wav
//                is read as well). Speaker from the folder; language "en"; audio without a
//                transcript is a missing_text reject, a transcript without audio missing_audio.
//   commonvoice  Common Voice: ROOT/SPLIT (corpus.split, validated.tsv by default; or the .tsv file
//                itself as corpus.path) with audio in ROOT/clips/PATH. Speaker from client_id;
//                language from the row's locale column, else the corpus folder's name (fa, en,
//                zh-CN, ...); up_votes/down_votes kept in CorpusItem::metadata.
//
// Text files may start with a UTF-8 BOM and end lines with CRLF; both are removed.
//
// Problems a row can have (malformed, duplicate id, a path that leaves the corpus root, empty
// text, no transcript) do not stop the listing: the item is kept with its reject reason so that it
// is recorded in rejects.jsonl like any other skipped sample. A malformed row keeps the row itself
// as its text, so that the reject shows what was there.
//
// Languages: a language the corpus declares (jsonl "language", Common Voice locale or folder,
// English for LibriTTS and VCTK, else corpus.language) always wins. Rows that declare none are
// detected from their script (dataset/language.h) with the corpus as context: in a corpus whose
// Arabic-script rows are Persian, a row with no letter that tells Persian from Arabic is Persian.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dataset/reject.h"

namespace sluice::dataset {

struct CorpusItem {
  std::string source;              // where the item came from, e.g. "metadata.csv:17"
  std::string id;                  // may be empty for a malformed row
  std::filesystem::path audio;     // resolved path inside the corpus root
  std::string text;                // for a malformed row: the row as written
  std::string speaker;
  std::string language;            // "" = detect from the script of the text
  std::optional<RejectReason> reject;
  std::string reject_detail;
  // Last, so that brace-initialised items written before it still compile.
  std::map<std::string, std::string> metadata;  // e.g. chapter, up_votes, down_votes
};

struct CorpusListing {
  std::filesystem::path root;          // folder the audio paths are confined to
  std::filesystem::path listing_file;  // metadata.csv, the .jsonl/.tsv file, or the root
  std::string format;                  // ljspeech | jsonl | libritts | vctk | commonvoice
  std::string recognised;              // why this format: what `auto` found, or "set by corpus.format"
  std::vector<std::string> notes;      // things a user should know (duplicate audio files, ...)
  std::vector<CorpusItem> items;
};

struct CorpusOptions {
  std::string format = "auto";        // auto | ljspeech | jsonl | libritts | vctk | commonvoice
  std::string text_column = "normalized";  // normalized | raw (ljspeech columns, libritts files)
  std::string speaker;                // speaker of items that name none
  std::string language;               // language of items whose corpus declares none; "" = detect
  std::string vctk_mic = "mic1";      // vctk: mic1 | mic2
  std::string split = "validated.tsv";  // commonvoice: which TSV of the corpus folder
};

// The formats read_corpus knows, in the order `auto` tries them.
const std::vector<std::string>& corpus_formats();

// Reads the listing of the corpus at `path` (a folder, or a .jsonl / .tsv file).
// Throws DataError when the corpus itself cannot be found or read, naming the path and what
// was expected there; ConfigError for an unknown format.
CorpusListing read_corpus(const std::filesystem::path& path, const CorpusOptions& options);

// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary, with "..." appended when
// cut: what a reject shows of a row.
std::string text_excerpt(const std::string& text, size_t max_bytes = 200);

}  // namespace sluice::dataset
