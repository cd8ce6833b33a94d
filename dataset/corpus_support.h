#pragma once
// Pieces every corpus reader shares (dataset/corpus.cpp, corpus_downloads.cpp). Not a public
// header: the readers' contract is dataset/corpus.h.
#include <filesystem>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "dataset/corpus.h"

namespace sluice::dataset::corpus_detail {

bool is_blank(const std::string& text);

// The file's lines with a leading UTF-8 BOM and each line's trailing '\r' removed. Throws
// DataError naming the file when it cannot be read.
std::vector<std::string> read_lines(const std::filesystem::path& file);

// A one-transcript text file (LibriTTS, VCTK) as one line: BOM removed, line ends become spaces,
// surrounding white space trimmed. Throws DataError naming the file when it cannot be read.
std::string read_transcript(const std::filesystem::path& file);

std::vector<std::string> split(const std::string& line, char separator);

// Sorted entries of a folder (empty when it does not exist): the listing order must not depend
// on the file system's.
std::vector<std::filesystem::path> sorted_subfolders(const std::filesystem::path& folder);

// The audio files of one folder by file stem. Extensions are tried in the order of
// kAudioExtensions (lossless first) when several files share a stem.
extern const std::vector<std::string> kAudioExtensions;  // ".wav", ".flac", ".ogg", ".opus", ".mp3"
class AudioFolder {
 public:
  explicit AudioFolder(const std::filesystem::path& folder);
  // The file for `stem`, or "" when there is none. When several files share the stem, the note
  // (for CorpusListing::notes) says which was taken.
  std::filesystem::path find(const std::string& stem, std::string* note = nullptr) const;
  // Every stem with at least one audio file, sorted.
  std::vector<std::string> stems() const;
  std::string looked_for(const std::string& stem) const;  // "wavs/ID.{wav,flac,...}" for messages

 private:
  std::filesystem::path folder_;
  std::map<std::string, std::vector<std::filesystem::path>> by_stem_;  // in kAudioExtensions order
};

// True when `candidate` lies inside `root` by its path alone ("..", absolute paths).
bool inside(const std::filesystem::path& root, const std::filesystem::path& candidate);

void reject(CorpusItem& item, RejectReason reason, std::string detail);

// The checks that apply to every format once an item's fields are known: empty id, audio path
// outside the root, duplicate id, empty text.
class ItemChecker {
 public:
  explicit ItemChecker(std::filesystem::path root) : root_(std::move(root)) {}
  void check(CorpusItem& item);

 private:
  std::filesystem::path root_;
  std::unordered_map<std::string, std::string> first_seen_;
};

// `path` relative to `root`, for sources and messages.
std::string relative_name(const std::filesystem::path& path, const std::filesystem::path& root);

CorpusListing read_libritts(const std::filesystem::path& root, const CorpusOptions& options);
CorpusListing read_vctk(const std::filesystem::path& root, const CorpusOptions& options);
CorpusListing read_commonvoice(const std::filesystem::path& tsv, const CorpusOptions& options);

// What `auto` looks for; "" when the folder is not of that format.
std::string recognise_libritts(const std::filesystem::path& folder);
std::string recognise_vctk(const std::filesystem::path& folder);
std::string recognise_commonvoice(const std::filesystem::path& folder, const CorpusOptions& options);

}  // namespace sluice::dataset::corpus_detail
