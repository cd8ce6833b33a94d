#pragma once
// Corpus readers: turn a corpus on disk into a list of items, one per metadata row or manifest
// line, in file order. Reading the listing touches no audio.
//
// Formats:
//   ljspeech  ROOT/metadata.csv with rows `id|text|normalized_text`, audio in ROOT/wavs/ID.wav
//   jsonl     a manifest file, one JSON object per line: {"id", "audio" (relative to the
//             manifest's folder), "text", optional "speaker", "language"}
//
// Problems a row can have (malformed, duplicate id, a path that leaves the corpus root, empty
// text) do not stop the listing: the item is kept with its reject reason so that it is recorded
// in rejects.jsonl like any other skipped sample.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dataset/reject.h"

namespace sluice::dataset {

struct CorpusItem {
  std::string source;              // where the item came from, e.g. "metadata.csv:17"
  std::string id;                  // may be empty for a malformed row
  std::filesystem::path audio;     // resolved path inside the corpus root
  std::string text;
  std::string speaker;
  std::string language;            // "" = detect from the script of the text
  std::optional<RejectReason> reject;
  std::string reject_detail;
};

struct CorpusListing {
  std::filesystem::path root;          // folder the audio paths are confined to
  std::filesystem::path listing_file;  // metadata.csv or the .jsonl manifest
  std::string format;                  // "ljspeech" or "jsonl"
  std::vector<CorpusItem> items;
};

struct CorpusOptions {
  std::string format = "auto";        // auto | ljspeech | jsonl
  std::string text_column = "normalized";  // ljspeech: normalized (3rd, else 2nd) | raw (2nd)
  std::string speaker;                // speaker of items that name none
  std::string language;               // language of items that name none; "" = detect
};

// Reads the listing of the corpus at `path` (a folder with metadata.csv, or a .jsonl file).
// Throws DataError when the corpus itself cannot be found or read, naming the path and what
// was expected there.
CorpusListing read_corpus(const std::filesystem::path& path, const CorpusOptions& options);

}  // namespace sluice::dataset
