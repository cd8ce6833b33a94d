#pragma once
// Token vocabularies: text (or IPA) -> token ids, one id per Unicode code point.
//
// A vocabulary is versioned and travels in the cache manifest (to_json/from_json), so that a cache
// always says how its token ids were made. The contract of a version: its table never changes.
// Adding or reordering a symbol means a new version ("chars-v2"), never an edit of "chars-v1";
// from_json refuses a table that claims a built-in version but differs from this build's.
//
// Ids 0-3 are the same in every vocabulary: <pad>, <unk>, <bos>, <eos>. Symbols follow.
//   chars-v1 (kind "characters", 87 ids): space and . , ! ? ' " - : ; ( ), a-z, the 32 Persian
//     letters plus آ, ZWNJ, the hamza forms ء أ إ ؤ ئ ٔ ۀ, and the Arabic letters the normaliser
//     keeps for "ar" (ة ى ي ك). It expects TextNormalizer output with lowercase on: capitals,
//     digits (expand_numbers off) and other scripts are unknown.
//   ipa-v1 (kind "phonemes", 75 ids): space and the same punctuation, then every code point
//     espeak-ng 1.51 emitted in IPA mode for the en, en-us, fa and ar voices over a broad sample
//     (licence texts plus random letter strings), stress marks ˈ ˌ and length ː included. It also
//     holds the digit "1" because espeak-ng 1.51's Persian voice writes ق and غ as "q1".
//
// Code points not in the table map to <unk> and are counted, never dropped, so a report can say
// which characters the corpus lost (describe_unknown).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::dataset {

// Code point -> occurrences that were mapped to <unk>.
using UnknownCounts = std::map<char32_t, int64_t>;

// For a report or log line: `U+1F600 "😀" x2, U+00E9 "é" x1`, most frequent first. Characters
// that do not print alone are shown by code point only (controls, spaces, format characters);
// combining marks are shown on a dotted circle (◌́). Empty for no unknowns.
std::string describe_unknown(const UnknownCounts& unknown);

class Vocabulary {
 public:
  static constexpr int32_t pad_id = 0;
  static constexpr int32_t unk_id = 1;
  static constexpr int32_t bos_id = 2;
  static constexpr int32_t eos_id = 3;

  static Vocabulary builtin_characters();  // "chars-v1"
  static Vocabulary builtin_phonemes();    // "ipa-v1"

  const std::string& version() const { return version_; }
  const std::string& kind() const { return kind_; }  // "characters" or "phonemes"
  size_t size() const { return symbols_.size(); }

  // The symbol of an id: one code point as UTF-8, or "<pad>", "<unk>", "<bos>", "<eos>".
  // Throws std::out_of_range for an id outside [0, size()).
  const std::string& symbol(int32_t id) const;

  // One id per code point of `normalized_utf8`. Unknown code points become unk_id and are added
  // to `unknown` (which the caller may share across samples; not locked here). With add_bos_eos
  // (setting text.add_bos_eos, default false) the ids are framed by bos_id ... eos_id.
  // Throws DataError when the text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view normalized_utf8, UnknownCounts& unknown,
                              bool add_bos_eos = false) const;

  // {"kind", "version", "pad", "unk", "bos", "eos", "symbols": [id -> symbol]}.
  nlohmann::json to_json() const;
  // The inverse of to_json. Throws CacheError naming what is wrong with a malformed table, or one
  // that claims a built-in version with different contents.
  static Vocabulary from_json(const nlohmann::json& json);

  bool operator==(const Vocabulary& other) const {
    return version_ == other.version_ && kind_ == other.kind_ && symbols_ == other.symbols_;
  }
  bool operator!=(const Vocabulary& other) const { return !(*this == other); }

 private:
  Vocabulary(std::string version, std::string kind, const std::u32string& symbols);
  Vocabulary(std::string version, std::string kind, std::vector<std::string> symbols);

  std::string version_;
  std::string kind_;
  std::vector<std::string> symbols_;           // id -> symbol
  std::unordered_map<char32_t, int32_t> ids_;  // code point -> id (specials excluded)
};

}  // namespace sluice::dataset
