#include "dataset/text_normalizer.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "common/error.h"
#include "dataset/language.h"
#include "dataset/number_words.h"

namespace sluice::dataset {
namespace {

constexpr char32_t kZwnj = 0x200C;

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_letter(char32_t c) {
  const utf8proc_category_t cat = category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

// Letters, marks and digits: what a number or abbreviation must not run into.
bool is_word_char(char32_t c) {
  const utf8proc_category_t cat = category(c);
  return is_letter(c) || cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
         cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_ND;
}

bool is_space(char32_t c) {
  // Tab and line breaks are Cc, U+2028/2029 are Zl/Zp; all of them separate words.
  return (c >= 0x09 && c <= 0x0D) || c == 0x85 || c == 0x2028 || c == 0x2029 ||
         category(c) == UTF8PROC_CATEGORY_ZS;
}

bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_letter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

// Typographic variants that NFKC leaves alone, folded into the vocabulary's ASCII punctuation.
char32_t fold_punctuation(char32_t c) {
  switch (c) {
    case 0x2018: case 0x2019: case 0x201A: case 0x201B: case 0x2032:  // ‘ ’ ‚ ‛ ′
      return '\'';
    case 0x201C: case 0x201D: case 0x201E: case 0x201F: case 0x00AB: case 0x00BB:  // “ ” „ ‟ « »
      return '"';
    case 0x2010: case 0x2012: case 0x2013: case 0x2014: case 0x2015: case 0x2212:  // ‐ ‒ – — ― −
      return '-';
    case 0x060C: return ',';  // Arabic comma
    case 0x061B: return ';';  // Arabic semicolon
    case 0x061F: return '?';  // Arabic question mark
    default: return c;
  }
}

// Words this file inserts (number words, expansions) are valid UTF-8 by construction.
std::u32string to_code_points(const std::string& words) { return decode_utf8(words); }

// Spaces collapsed and trimmed; ZWNJ kept only between two non-space characters.
std::u32string collapse_spaces(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c == ' ') {
      if (!out.empty() && out.back() == kZwnj) out.pop_back();
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (c == kZwnj) {
      if (!out.empty() && out.back() != ' ' && out.back() != kZwnj) out += kZwnj;
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == kZwnj)) out.pop_back();
  return out;
}

std::u32string nfkc(std::string_view valid_utf8) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid_utf8.data()),
                   static_cast<utf8proc_ssize_t>(valid_utf8.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  if (length < 0) {  // only out-of-memory is left once the input is known to be UTF-8
    throw DataError(std::string("Unicode NFKC normalisation failed: ") + utf8proc_errmsg(length));
  }
  return decode_utf8(std::string_view(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length)));
}

// Step 3 of the pipeline (header): spaces, control and format characters, punctuation.
std::u32string clean_up(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (is_space(c)) {
      out += ' ';
    } else if (c == kZwnj) {
      out += c;
    } else if (category(c) == UTF8PROC_CATEGORY_CC || category(c) == UTF8PROC_CATEGORY_CF) {
      continue;
    } else {
      out += fold_punctuation(c);
    }
  }
  return collapse_spaces(out);
}

// ---------------------------------------------------------------------------------------------
// Numbers, shared by English and Persian: the digits and separators differ, the shape does not.

struct NumberSyntax {
  int (*digit)(char32_t);         // the digit's value, or -1 when not a digit
  bool (*groups)(char32_t);       // thousands separator
  bool (*decimal_point)(char32_t);
};

struct ParsedNumber {
  std::string integer;   // ASCII digits, separators removed
  std::string fraction;  // ASCII digits after the decimal point; empty when there is none
  bool grouped = false;  // written with thousands separators
  size_t end = 0;        // index just past the number
};

// Thousands separators count only as groups of exactly three digits after a lead of one to three
// ("1,234,567"); "1,2" is two numbers and a comma.
ParsedNumber parse_number(const std::u32string& s, size_t begin, const NumberSyntax& syntax) {
  ParsedNumber number;
  const size_t n = s.size();
  auto digit_at = [&](size_t k) { return k < n ? syntax.digit(s[k]) : -1; };
  size_t j = begin;
  while (digit_at(j) >= 0) number.integer += static_cast<char>('0' + digit_at(j++));
  if (number.integer.size() <= 3) {
    while (j < n && syntax.groups(s[j]) && digit_at(j + 1) >= 0 && digit_at(j + 2) >= 0 &&
           digit_at(j + 3) >= 0 && digit_at(j + 4) < 0) {
      for (size_t k = j + 1; k <= j + 3; ++k) number.integer += static_cast<char>('0' + digit_at(k));
      number.grouped = true;
      j += 4;
    }
  }
  if (j < n && syntax.decimal_point(s[j]) && digit_at(j + 1) >= 0) {
    ++j;
    while (digit_at(j) >= 0) number.fraction += static_cast<char>('0' + digit_at(j++));
  }
  number.end = j;
  return number;
}

// Digit strings that are codes rather than quantities: a leading zero ("007", "0912") or more
// digits than int64 holds.
bool read_digit_by_digit(const ParsedNumber& number) {
  return number.integer.size() > 18 ||
         (!number.grouped && number.integer.size() > 1 && number.integer[0] == '0');
}

std::string join_digits(const std::string& digits, std::string (*cardinal)(int64_t)) {
  std::string words;
  for (const char d : digits) {
    if (!words.empty()) words += ' ';
    words += cardinal(d - '0');
  }
  return words;
}

// Appends words, separated by a space from a preceding letter or digit; punctuation stays attached.
void append_words(std::u32string& out, const std::string& words) {
  if (!out.empty() && is_word_char(out.back())) out += ' ';
  out += to_code_points(words);
}

// A space between inserted words and a letter or digit that follows them.
void separate_from_next(std::u32string& out, const std::u32string& s, size_t next) {
  if (next < s.size() && is_word_char(s[next])) out += ' ';
}

bool negative_sign_at(const std::u32string& s, size_t i, const NumberSyntax& syntax) {
  return s[i] == '-' && i + 1 < s.size() && syntax.digit(s[i + 1]) >= 0 &&
         (i == 0 || s[i - 1] == ' ' || s[i - 1] == '(');
}

// ---------------------------------------------------------------------------------------------
// English

const NumberSyntax kEnglishNumbers{
    [](char32_t c) { return is_ascii_digit(c) ? static_cast<int>(c - '0') : -1; },
    [](char32_t c) { return c == ','; },
    [](char32_t c) { return c == '.'; },
};

std::string english_integer(const ParsedNumber& number) {
  if (read_digit_by_digit(number)) return join_digits(number.integer, &english_cardinal);
  return english_cardinal(std::stoll(number.integer));
}

// "3.14" -> "three point one four": English reads the decimals one digit at a time.
std::string english_quantity(const ParsedNumber& number) {
  std::string words = english_integer(number);
  if (!number.fraction.empty()) words += " point " + join_digits(number.fraction, &english_cardinal);
  return words;
}

// "10:30" (hours 0-24, then exactly two digits of minutes 00-59).
bool is_time(const std::u32string& s, const ParsedNumber& hours) {
  const size_t colon = hours.end;
  if (hours.grouped || !hours.fraction.empty() || hours.integer.size() > 2 ||
      std::stoi(hours.integer) > 24 || colon + 2 >= s.size() || s[colon] != ':' ||
      !is_ascii_digit(s[colon + 1]) || !is_ascii_digit(s[colon + 2]) || s[colon + 1] > '5') {
    return false;
  }
  return colon + 3 == s.size() || !is_ascii_digit(s[colon + 3]);
}

// 10:00 -> "ten o'clock", 10:05 -> "ten oh five", 10:30 -> "ten thirty".
std::string time_words(int hours, int minutes) {
  const std::string head = english_cardinal(hours);
  if (minutes == 0) return head + " o'clock";
  if (minutes < 10) return head + " oh " + english_cardinal(minutes);
  return head + " " + english_cardinal(minutes);
}

// "eighty" -> "eighties", "hundred" -> "hundreds".
std::string plural(const std::string& words) {
  if (words.back() == 'y') return words.substr(0, words.size() - 1) + "ies";
  return words + "s";
}

bool is_year(const ParsedNumber& number) {
  if (number.grouped || !number.fraction.empty() || number.integer.size() != 4 ||
      number.integer[0] == '0') {
    return false;
  }
  const int value = std::stoi(number.integer);
  return value >= 1000 && value <= 2999;
}

// Case-insensitive match of an ASCII word at s[at], not followed by another letter.
bool word_at(const std::u32string& s, size_t at, std::string_view word) {
  if (at + word.size() > s.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (ascii_lower(s[at + k]) != static_cast<char32_t>(word[k])) return false;
  }
  return at + word.size() == s.size() || !is_letter(s[at + word.size()]);
}

struct Currency {
  char32_t symbol;
  const char* unit;
  const char* units;
  const char* subunit;
  const char* subunits;
};
constexpr std::array<Currency, 3> kCurrencies{{
    {U'$', "dollar", "dollars", "cent", "cents"},
    {U'£', "pound", "pounds", "penny", "pence"},
    {U'€', "euro", "euros", "cent", "cents"},
}};
constexpr std::array<const char*, 4> kScaleWords{"thousand", "million", "billion", "trillion"};

// "$3.50" at s[i]; returns the index past what was read.
size_t expand_currency(const Currency& currency, const std::u32string& s, size_t i,
                       std::u32string& out) {
  const ParsedNumber number = parse_number(s, i + 1, kEnglishNumbers);
  // "$5 million" is said "five million dollars".
  if (number.end < s.size() && s[number.end] == ' ') {
    for (const char* scale : kScaleWords) {
      if (word_at(s, number.end + 1, scale)) {
        append_words(out, english_quantity(number) + " " + scale + " " + currency.units);
        const size_t end = number.end + 1 + std::string_view(scale).size();
        separate_from_next(out, s, end);
        return end;
      }
    }
  }
  std::string words;
  const bool one = number.integer == "1";
  if (number.fraction.empty()) {
    words = english_integer(number) + " " + (one ? currency.unit : currency.units);
  } else if (number.fraction.size() <= 2) {
    const int cents = std::stoi(number.fraction) * (number.fraction.size() == 1 ? 10 : 1);
    const bool whole = number.integer.find_first_not_of('0') != std::string::npos;
    if (whole || cents == 0) words = english_integer(number) + " " + (one ? currency.unit : currency.units);
    if (cents != 0) {
      if (!words.empty()) words += " and ";
      words += english_cardinal(cents) + " " + (cents == 1 ? currency.subunit : currency.subunits);
    }
  } else {  // "$3.505" is not an amount of cents
    words = english_quantity(number) + " " + currency.units;
  }
  append_words(out, words);
  separate_from_next(out, s, number.end);
  return number.end;
}

// A number starting at s[i] (a digit); returns the index past what was read.
size_t expand_english_number(const std::u32string& s, size_t i, bool negative, std::u32string& out) {
  const ParsedNumber number = parse_number(s, i, kEnglishNumbers);
  size_t end = number.end;
  std::string words;
  if (!negative && is_time(s, number)) {
    words = time_words(std::stoi(number.integer), std::stoi(encode_utf8(s.substr(end + 1, 2))));
    end += 3;
  } else if (end < s.size() && s[end] == '%') {
    words = english_quantity(number) + " percent";
    ++end;
  } else if (!negative && number.fraction.empty() && !read_digit_by_digit(number) &&
             (word_at(s, end, "st") || word_at(s, end, "nd") || word_at(s, end, "rd") ||
              word_at(s, end, "th"))) {
    words = english_ordinal(std::stoll(number.integer));
    end += 2;
  } else if (!negative && is_year(number)) {
    words = english_year(std::stoll(number.integer));
    if (word_at(s, end, "s")) {  // "1980s" -> "nineteen eighties"
      words = plural(words);
      ++end;
    }
  } else {
    words = english_quantity(number);
  }
  append_words(out, negative ? "minus " + words : words);
  separate_from_next(out, s, end);
  return end;
}

// Expanded only before a period, as written in running text ("Dr. Smith"); a bare "dr" or "st"
// is too often something else.
struct Abbreviation {
  const char* abbreviation;
  const char* expansion;
};
constexpr std::array<Abbreviation, 27> kAbbreviations{{
    {"mr", "mister"},        {"mrs", "missus"},        {"dr", "doctor"},
    {"drs", "doctors"},      {"st", "saint"},          {"co", "company"},
    {"jr", "junior"},        {"sr", "senior"},         {"maj", "major"},
    {"gen", "general"},      {"rev", "reverend"},      {"lt", "lieutenant"},
    {"hon", "honorable"},    {"sgt", "sergeant"},      {"capt", "captain"},
    {"esq", "esquire"},      {"ltd", "limited"},       {"col", "colonel"},
    {"ft", "fort"},          {"mt", "mount"},          {"prof", "professor"},
    {"gov", "governor"},     {"sen", "senator"},       {"rep", "representative"},
    {"etc", "et cetera"},    {"vs", "versus"},         {"inc", "incorporated"},
}};

const Abbreviation* find_abbreviation(const std::u32string& s, size_t begin, size_t end) {
  for (const Abbreviation& entry : kAbbreviations) {
    const std::string_view word = entry.abbreviation;
    if (word.size() != end - begin) continue;
    bool same = true;
    for (size_t k = 0; k < word.size() && same; ++k) same = ascii_lower(s[begin + k]) == static_cast<char32_t>(word[k]);
    if (same) return &entry;
  }
  return nullptr;
}

std::u32string expand_english(const std::u32string& s, const TextConfig& config) {
  std::u32string out;
  out.reserve(s.size() * 2);
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const char32_t c = s[i];
    if (config.expand_abbreviations && is_ascii_letter(c) && (i == 0 || !is_word_char(s[i - 1]))) {
      size_t j = i;
      while (j < n && is_ascii_letter(s[j])) ++j;
      const Abbreviation* entry = j < n && s[j] == '.' ? find_abbreviation(s, i, j) : nullptr;
      if (entry == nullptr) {
        out.append(s, i, j - i);
        i = j;
        continue;
      }
      std::u32string expansion = to_code_points(entry->expansion);
      if (c >= 'A' && c <= 'Z') expansion[0] = expansion[0] - 'a' + 'A';  // "Dr." -> "Doctor"
      out += expansion;
      i = j + 1;
      if (i == n) out += '.';  // the period also ended the text: keep the sentence's end
      separate_from_next(out, s, i);
      continue;
    }
    if (config.expand_numbers) {
      if (i + 1 < n && is_ascii_digit(s[i + 1])) {
        const Currency* currency = nullptr;
        for (const Currency& candidate : kCurrencies) {
          if (candidate.symbol == c) currency = &candidate;
        }
        if (currency != nullptr) {
          i = expand_currency(*currency, s, i, out);
          continue;
        }
        if (negative_sign_at(s, i, kEnglishNumbers)) {
          i = expand_english_number(s, i + 1, true, out);
          continue;
        }
      }
      if (is_ascii_digit(c)) {
        i = expand_english_number(s, i, false, out);
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Persian and Arabic

int any_digit(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 0x06F0 && c <= 0x06F9) return static_cast<int>(c - 0x06F0);  // Persian
  if (c >= 0x0660 && c <= 0x0669) return static_cast<int>(c - 0x0660);  // Arabic-Indic
  return -1;
}

const NumberSyntax kPersianNumbers{
    &any_digit,
    [](char32_t c) { return c == ',' || c == 0x066C; },  // ٬ Arabic thousands separator
    [](char32_t c) { return c == '.' || c == 0x066B; },  // ٫ Arabic decimal separator
};

// "۳٫۲۵" -> "سه ممیز بیست و پنج": Persian reads the decimals as one number, each leading zero as
// "صفر" ("۳٫۰۵" -> "سه ممیز صفر پنج").
std::string persian_quantity(const ParsedNumber& number) {
  std::string words = read_digit_by_digit(number) ? join_digits(number.integer, &persian_cardinal)
                                                  : persian_cardinal(std::stoll(number.integer));
  if (number.fraction.empty()) return words;
  words += " ممیز";
  const size_t significant = number.fraction.find_first_not_of('0');
  const size_t zeros = significant == std::string::npos ? number.fraction.size() : significant;
  for (size_t k = 0; k < zeros; ++k) words += " " + persian_cardinal(0);
  const std::string rest = number.fraction.substr(zeros);
  if (rest.empty()) return words;
  return words + " " + (rest.size() > 18 ? join_digits(rest, &persian_cardinal) : persian_cardinal(std::stoll(rest)));
}

size_t expand_persian_number(const std::u32string& s, size_t i, bool negative, std::u32string& out) {
  const ParsedNumber number = parse_number(s, i, kPersianNumbers);
  size_t end = number.end;
  std::string words = persian_quantity(number);
  if (end < s.size() && (s[end] == '%' || s[end] == 0x066A)) {  // ٪ Arabic percent sign
    words += " درصد";
    ++end;
  }
  append_words(out, negative ? "منفی " + words : words);
  separate_from_next(out, s, end);
  return end;
}

std::u32string apply_arabic_script_rules(const std::u32string& s, bool persian,
                                         const TextConfig& config) {
  std::u32string letters;
  letters.reserve(s.size());
  for (const char32_t c : s) {
    if (c == 0x0640 || (c >= 0x064B && c <= 0x0652) || c == 0x0670) continue;  // tatweel, harakat
    if (persian && (c == 0x064A || c == 0x0649)) {
      letters += 0x06CC;  // ي ى -> ی
    } else if (persian && c == 0x0643) {
      letters += 0x06A9;  // ك -> ک
    } else {
      letters += c;
    }
  }
  if (!persian || !config.expand_numbers) return letters;

  std::u32string out;
  out.reserve(letters.size() * 2);
  for (size_t i = 0; i < letters.size();) {
    if (negative_sign_at(letters, i, kPersianNumbers)) {
      i = expand_persian_number(letters, i + 1, true, out);
    } else if (any_digit(letters[i]) >= 0) {
      i = expand_persian_number(letters, i, false, out);
    } else {
      out += letters[i++];
    }
  }
  return out;
}

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  for (utf8proc_ssize_t at = 0; at < size;) {
    utf8proc_int32_t code_point = 0;
    const utf8proc_ssize_t length = utf8proc_iterate(bytes + at, size - at, &code_point);
    if (length <= 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(bytes[at]));
      throw DataError("text is not valid UTF-8: byte " + std::string(byte) + " at byte offset " +
                      std::to_string(at) + " starts no valid sequence; re-encode the transcript as UTF-8");
    }
    out += static_cast<char32_t>(code_point);
    at += length;
  }
  return out;
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  utf8proc_uint8_t buffer[4];
  for (const char32_t c : code_points) {
    const utf8proc_ssize_t length = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buffer);
    out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
  }
  return out;
}

TextNormalizer::TextNormalizer(TextConfig config) : config_(config) {}

std::string TextNormalizer::normalize(std::string_view text, std::string_view language) const {
  decode_utf8(text);  // validates, so that a bad byte is reported with its offset
  std::u32string s = clean_up(nfkc(text));

  const std::string primary = primary_language(language);
  if (primary == "en") {
    s = expand_english(s, config_);
  } else if (primary == "fa" || primary == "ar") {
    s = apply_arabic_script_rules(s, primary == "fa", config_);
  }
  if (config_.lowercase) {
    for (char32_t& c : s) c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  }
  return encode_utf8(collapse_spaces(s));
}

}  // namespace sluice::dataset
