#pragma once
// Language codes of transcripts. A language named by the corpus manifest always wins; the caller
// uses detect_language only for rows that name none.
#include <string>
#include <string_view>

namespace sluice::dataset {

// Guesses the language of a transcript from its script. The rule, in order:
//   1. Count Arabic-script letters and digits (U+0600-06FF, 0750-077F, 08A0-08FF, FB50-FDFF,
//      FE70-FEFF) and Latin letters (ASCII, Latin-1, Latin Extended, full-width).
//   2. If Arabic script is present and at least as frequent as Latin: "fa" when any letter or
//      digit exists only in Persian orthography (پ چ ژ گ, Persian yeh ی U+06CC, Persian kaf ک
//      U+06A9, Persian digits U+06F0-06F9) or a ZWNJ (U+200C) follows an Arabic-script letter
//      (Persian orthography joins prefixes with it: می‌خواهم); "ar" when it has none of these and
//      a teh marbuta ة (U+0629, Arabic orthography's feminine ending, not written in Persian);
//      otherwise the text could be either and `ambiguous_arabic_script` is returned. Persian typed
//      on an Arabic keyboard (Arabic yeh ي and kaf ك, no ZWNJ) is such a text: "قطار تهران به
//      مشهد" has no letter that tells the two apart. read_corpus passes "fa" here for a corpus
//      whose Arabic-script rows are Persian (dataset/corpus.h).
//   3. Else, if Latin letters are present: "en" (the only Latin-script language the normaliser
//      knows).
//   4. Else "und" (undetermined: no letters, or another script).
// Limits: Urdu and other Perso-Arabic orthographies read as "fa"; a Persian text with none of the
// Persian-only letters (e.g. "سلام") reads as `ambiguous_arabic_script`. Never throws: bytes that are not UTF-8
// are skipped here and reported by the normaliser, which sees the same text next.
std::string detect_language(std::string_view utf8_text, std::string_view ambiguous_arabic_script = "ar");

// The primary subtag of a language code, lowercased: "en-US" and "en_us" -> "en", "FA" -> "fa".
std::string primary_language(std::string_view code);

// Whether `code` reads as a language code: a primary subtag of 2-3 letters (ISO 639-1/-3), then
// any subtags of 1-8 letters or digits after '-' or '_' ("en", "fas", "pt-BR", "zh_Hant_TW"). A
// corpus once stored "<script>" as a language.
bool is_language_code(std::string_view code);

}  // namespace sluice::dataset
