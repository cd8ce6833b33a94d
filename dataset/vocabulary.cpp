#include "dataset/vocabulary.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include <utf8proc.h>

#include "common/error.h"
#include "dataset/text_normalizer.h"

namespace sluice::dataset {
namespace {

using json = nlohmann::json;

constexpr std::array<const char*, 4> kSpecials{"<pad>", "<unk>", "<bos>", "<eos>"};

// Shared by both built-ins so that the phonemizer's punctuation (phonemizer.h) keeps its ids.
constexpr std::u32string_view kSpaceAndPunctuation = U" .,!?'\"-:;()";

// chars-v1, after the specials. Frozen: see the header.
std::u32string character_symbols() {
  std::u32string symbols(kSpaceAndPunctuation);
  for (char32_t c = 'a'; c <= 'z'; ++c) symbols += c;
  // The Persian alphabet in dictionary order, آ after ا.
  symbols += U"اآبپتثجچحخدذرزژسشصضطظعغفقکگلمنوهی";
  symbols += U'\u200C';  // ZWNJ
  symbols += U"ءأإؤئ";
  symbols += U'\u0654';  // hamza above, as in خانهٔ
  symbols += U'\u06C0';  // ۀ heh with yeh above
  symbols += U"ةىيك";     // Arabic letters the normaliser keeps for "ar"
  return symbols;
}

// ipa-v1, after the specials. Frozen: see the header. Sorted by code point.
std::u32string phoneme_symbols() {
  std::u32string symbols(kSpaceAndPunctuation);
  symbols += U"1abdefhijklmnopqrstuvwxz";
  symbols += U"æðħŋɐɑɒɔɕəɚɛɜɡɣɪɬɹɾʃʊʌʒʔʕˈˌːˤ";
  symbols += U'\u0303';  // combining tilde (nasalised vowels in loanwords)
  symbols += U'\u0329';  // combining syllabic mark (en-us "ʔn̩")
  symbols += U'\u032A';  // combining dental mark (ar)
  symbols += U"θχᵻ";
  return symbols;
}

const Vocabulary& builtin(const std::string& version) {
  static const Vocabulary characters = Vocabulary::builtin_characters();
  static const Vocabulary phonemes = Vocabulary::builtin_phonemes();
  if (version == characters.version()) return characters;
  return phonemes;
}

bool is_builtin_version(const std::string& version) {
  return version == "chars-v1" || version == "ipa-v1";
}

std::string code_point_label(char32_t c) {
  char label[16];
  std::snprintf(label, sizeof label, "U+%04X", static_cast<unsigned>(c));
  return label;
}

// How a character appears in describe_unknown (see the header).
std::string printable(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return "";
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return encode_utf8(std::u32string{U'\u25CC', c});
    default:
      return encode_utf8(std::u32string(1, c));
  }
}

[[noreturn]] void bad_table(const std::string& what) {
  throw CacheError("the vocabulary in the cache manifest is malformed: " + what +
                   "; the cache was not written by this build's prep: delete it and run prep again");
}

}  // namespace

std::string describe_unknown(const UnknownCounts& unknown) {
  std::vector<std::pair<char32_t, int64_t>> entries(unknown.begin(), unknown.end());
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text;
  for (const auto& [code_point, count] : entries) {
    if (!text.empty()) text += ", ";
    text += code_point_label(code_point);
    const std::string glyph = printable(code_point);
    if (!glyph.empty()) text += " \"" + glyph + "\"";
    text += " x" + std::to_string(count);
  }
  return text;
}

Vocabulary::Vocabulary(std::string version, std::string kind, const std::u32string& symbols)
    : Vocabulary(std::move(version), std::move(kind), [&symbols] {
        std::vector<std::string> table(kSpecials.begin(), kSpecials.end());
        for (const char32_t c : symbols) table.push_back(encode_utf8(std::u32string(1, c)));
        return table;
      }()) {}

Vocabulary::Vocabulary(std::string version, std::string kind, std::vector<std::string> symbols)
    : version_(std::move(version)), kind_(std::move(kind)), symbols_(std::move(symbols)) {
  for (size_t id = kSpecials.size(); id < symbols_.size(); ++id) {
    const std::u32string code_points = decode_utf8(symbols_[id]);
    ids_.emplace(code_points.at(0), static_cast<int32_t>(id));
  }
}

Vocabulary Vocabulary::builtin_characters() {
  return Vocabulary("chars-v1", "characters", character_symbols());
}

Vocabulary Vocabulary::builtin_phonemes() {
  return Vocabulary("ipa-v1", "phonemes", phoneme_symbols());
}

const std::string& Vocabulary::symbol(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= symbols_.size()) {
    throw std::out_of_range("token id " + std::to_string(id) + " is outside vocabulary " +
                            version_ + " (size " + std::to_string(symbols_.size()) + ")");
  }
  return symbols_[static_cast<size_t>(id)];
}

std::vector<int32_t> Vocabulary::encode(std::string_view normalized_utf8, UnknownCounts& unknown,
                                        bool add_bos_eos) const {
  const std::u32string code_points = decode_utf8(normalized_utf8);
  std::vector<int32_t> ids;
  ids.reserve(code_points.size() + 2);
  if (add_bos_eos) ids.push_back(bos_id);
  for (const char32_t c : code_points) {
    const auto found = ids_.find(c);
    if (found != ids_.end()) {
      ids.push_back(found->second);
    } else {
      ids.push_back(unk_id);
      ++unknown[c];
    }
  }
  if (add_bos_eos) ids.push_back(eos_id);
  return ids;
}

json Vocabulary::to_json() const {
  return json{{"kind", kind_},     {"version", version_}, {"pad", pad_id},       {"unk", unk_id},
              {"bos", bos_id},     {"eos", eos_id},       {"symbols", symbols_}};
}

Vocabulary Vocabulary::from_json(const json& j) {
  if (!j.is_object()) bad_table("expected an object, found " + std::string(j.type_name()));
  for (const char* key : {"kind", "version"}) {
    if (!j.contains(key) || !j[key].is_string()) bad_table(std::string("\"") + key + "\" must be a string");
  }
  const std::string kind = j["kind"].get<std::string>();
  const std::string version = j["version"].get<std::string>();
  if (kind != "characters" && kind != "phonemes") {
    bad_table("\"kind\" is \"" + kind + "\", expected \"characters\" or \"phonemes\"");
  }
  const std::pair<const char*, int32_t> specials[] = {
      {"pad", pad_id}, {"unk", unk_id}, {"bos", bos_id}, {"eos", eos_id}};
  for (const auto& [key, id] : specials) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() != id) {
      bad_table(std::string("\"") + key + "\" must be " + std::to_string(id));
    }
  }
  if (!j.contains("symbols") || !j["symbols"].is_array()) bad_table("\"symbols\" must be an array");

  std::vector<std::string> symbols;
  std::unordered_map<char32_t, size_t> seen;
  for (const json& entry : j["symbols"]) {
    const size_t id = symbols.size();
    if (!entry.is_string()) bad_table("symbol " + std::to_string(id) + " is not a string");
    std::string symbol = entry.get<std::string>();
    if (id < kSpecials.size()) {
      if (symbol != kSpecials[id]) {
        bad_table("symbol " + std::to_string(id) + " is \"" + symbol + "\", expected \"" + kSpecials[id] + "\"");
      }
    } else {
      std::u32string code_points;
      try {
        code_points = decode_utf8(symbol);
      } catch (const DataError&) {
        bad_table("symbol " + std::to_string(id) + " is not valid UTF-8");
      }
      if (code_points.size() != 1) {
        bad_table("symbol " + std::to_string(id) + " (\"" + symbol + "\") is not one code point");
      }
      const auto [previous, inserted] = seen.emplace(code_points[0], id);
      if (!inserted) {
        bad_table(code_point_label(code_points[0]) + " is both symbol " +
                  std::to_string(previous->second) + " and " + std::to_string(id));
      }
    }
    symbols.push_back(std::move(symbol));
  }
  if (symbols.size() < kSpecials.size()) bad_table("fewer symbols than the four special tokens");

  Vocabulary vocabulary(version, kind, std::move(symbols));
  if (is_builtin_version(version) && vocabulary != builtin(version)) {
    throw CacheError("the cache's vocabulary claims version " + version +
                     " but its table differs from this build's " + version +
                     ": the token ids would mean different symbols; run prep again to rebuild the cache");
  }
  return vocabulary;
}

}  // namespace sluice::dataset
