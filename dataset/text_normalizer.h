#pragma once
// Transcript normalisation: the first text stage of prep, before the phonemizer (phonemizer.h) and
// the vocabulary (vocabulary.h). The output is what the cache stores as a sample's text.
//
// Pipeline of TextNormalizer::normalize, in order:
//   1. Validate UTF-8. Invalid input throws DataError naming the byte offset (the caller turns it
//      into a reject of that sample).
//   2. Unicode NFKC (utf8proc): full-width letters become ASCII, ligatures split (ﬁ -> fi), Arabic
//      presentation forms become letters (ﻻ -> لا). NFKC leaves ZWNJ (U+200C) alone.
//   3. Clean-up, every language:
//      - every Unicode space (Zs, tab, line breaks, U+2028/2029) becomes one ASCII space;
//      - control characters (Cc) and format characters (Cf: BOM, LRM/RLM, bidi embeddings, ZWJ,
//        ZWSP, soft hyphen) are removed, except ZWNJ, which Persian spelling needs (می‌خواهم);
//      - typographic punctuation is folded into the ASCII set the vocabulary knows: curly quotes
//        and « » -> ' or ", dashes and the minus sign -> -, Arabic comma/semicolon/question mark
//        (، ؛ ؟) -> , ; ?
//   4. Language rules, chosen by primary_language(language) (language.h):
//      "en": abbreviations (Mr. -> mister, Dr. -> doctor, St. -> saint, etc. -> et cetera, ...;
//            only when followed by a period) and numbers: integers (1,234), decimals (3.5 -> three
//            point five), ordinals (22nd), currency ($3.50 -> three dollars and fifty cents,
//            also £ and €, "$5 million" -> five million dollars), percent (50%), negative numbers
//            (-5 -> minus five), times (10:30 -> ten thirty, 10:00 -> ten o'clock), and four-digit
//            integers 1000-2999 read as years (1984 -> nineteen eighty-four, 1980s -> nineteen
//            eighties). Digit strings with a leading zero (007) or too long for int64 are read
//            digit by digit. Not handled: dates (3/4/1990), fractions, phone numbers, units.
//      "fa": Arabic yeh and alef maksura (ي ى) -> Persian yeh ی, Arabic kaf ك -> Persian kaf ک;
//            digits - Persian (۰-۹), Arabic-Indic (٠-٩) and ASCII alike - spelled as Persian words
//            (۲۵ -> بیست و پنج; separators ٬ and , group thousands, ٫ and . mark decimals read
//            "ممیز"; ٪ and % read "درصد").
//      "fa" and "ar": tatweel (U+0640) and the vowel diacritics (harakat U+064B-0652, dagger alef
//            U+0670) are removed: corpora mark them inconsistently, and unvowelled spelling is
//            what espeak-ng's voices and the vocabulary expect. Hamza forms (أ ؤ ئ ء, U+0654)
//            are kept. Not handled: dates (۱۴۰۲/۰۵/۱۲), ordinals written with digits.
//      "ar" keeps ي ى ك and its digits: espeak-ng's Arabic voice misreads Persian ی and ک (it
//            spells out their names) and reads digits itself; Persian number words would be wrong.
//      Any other language gets only the steps for every language.
//   5. Lowercase (when TextConfig::lowercase), Unicode-aware; Arabic script has no case.
//   6. Spaces collapsed and trimmed; ZWNJ kept only between two non-space characters (repeats
//      collapse to one, one next to a space or at either end is dropped).
//
// normalize is const and keeps no state, so one TextNormalizer may be shared by worker threads.
#include <string>
#include <string_view>

namespace sluice::dataset {

// The text.* settings that change the normalised text (schema in runtime/settings.cpp).
struct TextConfig {
  bool lowercase = true;
  bool expand_numbers = true;
  bool expand_abbreviations = true;
};

class TextNormalizer {
 public:
  explicit TextNormalizer(TextConfig config = {});

  // The normalised UTF-8 text; empty when nothing is left (the caller rejects the sample).
  // Throws DataError when `text` is not valid UTF-8.
  std::string normalize(std::string_view text, std::string_view language) const;

  const TextConfig& config() const { return config_; }

 private:
  TextConfig config_;
};

// UTF-8 <-> code points, shared by the text stages. decode_utf8 throws DataError naming the byte
// offset of the first invalid sequence (overlong forms, surrogates and truncated sequences are
// invalid).
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view code_points);

}  // namespace sluice::dataset
