#include "dataset/number_words.h"

#include <array>
#include <string_view>
#include <vector>

namespace sluice::dataset {
namespace {

// The magnitude as unsigned, so that INT64_MIN (whose negation overflows int64) still works.
uint64_t magnitude(int64_t n) {
  return n < 0 ? uint64_t{0} - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
}

// Scales from the largest down; uint64 ends below 10^21, so quintillion is the last one needed.
struct Scale {
  uint64_t value;
  const char* english;
  const char* persian;
};
constexpr std::array<Scale, 6> kScales{{
    {1'000'000'000'000'000'000ULL, "quintillion", "کوینتیلیون"},
    {1'000'000'000'000'000ULL, "quadrillion", "کوادریلیون"},
    {1'000'000'000'000ULL, "trillion", "تریلیون"},
    {1'000'000'000ULL, "billion", "میلیارد"},
    {1'000'000ULL, "million", "میلیون"},
    {1'000ULL, "thousand", "هزار"},
}};

// ---------------------------------------------------------------------------------------------
// English

constexpr std::array<const char*, 20> kEnglishSmall{
    "zero",    "one",     "two",       "three",    "four",     "five",    "six",
    "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen",  "seventeen", "eighteen", "nineteen"};
constexpr std::array<const char*, 10> kEnglishTens{
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};

std::string english_below_hundred(unsigned n) {
  if (n < 20) return kEnglishSmall[n];
  std::string words = kEnglishTens[n / 10];
  if (n % 10 != 0) words += std::string("-") + kEnglishSmall[n % 10];
  return words;
}

// 1..999; the caller never passes 0, which is silent inside larger numbers.
std::string english_below_thousand(unsigned n) {
  std::string words;
  if (n >= 100) {
    words = std::string(kEnglishSmall[n / 100]) + " hundred";
    n %= 100;
    if (n == 0) return words;
    words += ' ';
  }
  return words + english_below_hundred(n);
}

std::string english_magnitude(uint64_t n) {
  if (n == 0) return "zero";
  std::string words;
  auto append = [&words](const std::string& part) {
    if (!words.empty()) words += ' ';
    words += part;
  };
  for (const Scale& scale : kScales) {
    if (n >= scale.value) {
      append(english_below_thousand(static_cast<unsigned>(n / scale.value)) + " " + scale.english);
      n %= scale.value;
    }
  }
  if (n != 0) append(english_below_thousand(static_cast<unsigned>(n)));
  return words;
}

// ---------------------------------------------------------------------------------------------
// Persian

constexpr std::array<const char*, 20> kPersianSmall{
    "صفر",   "یک",    "دو",     "سه",    "چهار",  "پنج",    "شش",
    "هفت",   "هشت",   "نه",     "ده",    "یازده", "دوازده", "سیزده",
    "چهارده", "پانزده", "شانزده", "هفده",  "هجده",  "نوزده"};
constexpr std::array<const char*, 10> kPersianTens{
    "", "", "بیست", "سی", "چهل", "پنجاه", "شصت", "هفتاد", "هشتاد", "نود"};
// Persian hundreds are single words with irregular stems (دویست, سیصد, پانصد), not "دو صد".
constexpr std::array<const char*, 10> kPersianHundreds{
    "", "صد", "دویست", "سیصد", "چهارصد", "پانصد", "ششصد", "هفتصد", "هشتصد", "نهصد"};
constexpr std::string_view kPersianAnd = " و ";

// 1..999 as its parts (each later joined with " و ").
void persian_below_thousand(unsigned n, std::vector<std::string>& parts) {
  if (n >= 100) parts.emplace_back(kPersianHundreds[n / 100]);
  n %= 100;
  if (n >= 20) {
    parts.emplace_back(kPersianTens[n / 10]);
    n %= 10;
  }
  if (n != 0) parts.emplace_back(kPersianSmall[n]);
}

std::string persian_magnitude(uint64_t n) {
  if (n == 0) return kPersianSmall[0];
  std::vector<std::string> parts;
  for (const Scale& scale : kScales) {
    if (n < scale.value) continue;
    const auto count = static_cast<unsigned>(n / scale.value);
    n %= scale.value;
    if (count == 1 && scale.value == 1000) {
      parts.emplace_back(scale.persian);  // "هزار", never "یک هزار"
      continue;
    }
    std::vector<std::string> group;
    persian_below_thousand(count, group);
    std::string words;
    for (const std::string& part : group) {
      if (!words.empty()) words += kPersianAnd;
      words += part;
    }
    parts.push_back(words + " " + scale.persian);
  }
  if (n != 0) persian_below_thousand(static_cast<unsigned>(n), parts);
  std::string words;
  for (const std::string& part : parts) {
    if (!words.empty()) words += kPersianAnd;
    words += part;
  }
  return words;
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string english_cardinal(int64_t n) {
  const std::string words = english_magnitude(magnitude(n));
  return n < 0 ? "minus " + words : words;
}

std::string english_ordinal(int64_t n) {
  std::string words = english_magnitude(magnitude(n));
  // Only the last word changes: "twenty-one" -> "twenty-first", "one hundred" -> "one hundredth".
  const size_t cut = words.find_last_of(" -") == std::string::npos ? 0 : words.find_last_of(" -") + 1;
  const std::string last = words.substr(cut);
  struct Irregular {
    const char* cardinal;
    const char* ordinal;
  };
  static constexpr std::array<Irregular, 7> kIrregular{{{"one", "first"},
                                                        {"two", "second"},
                                                        {"three", "third"},
                                                        {"five", "fifth"},
                                                        {"eight", "eighth"},
                                                        {"nine", "ninth"},
                                                        {"twelve", "twelfth"}}};
  std::string ordinal;
  for (const Irregular& irregular : kIrregular) {
    if (last == irregular.cardinal) ordinal = irregular.ordinal;
  }
  if (ordinal.empty()) {
    ordinal = last.back() == 'y' ? last.substr(0, last.size() - 1) + "ieth" : last + "th";
  }
  words = words.substr(0, cut) + ordinal;
  return n < 0 ? "minus " + words : words;
}

std::string english_year(int64_t year) {
  if (year < 1000 || year > 9999) return english_cardinal(year);
  const auto century = static_cast<unsigned>(year / 100);
  const auto rest = static_cast<unsigned>(year % 100);
  // 2000..2009 and 1000..1009 are said as thousands ("two thousand five"), not "twenty oh five".
  if (century % 10 == 0 && rest < 10) return english_cardinal(year);
  const std::string head = english_below_hundred(century);
  if (rest == 0) return head + " hundred";
  if (rest < 10) return head + " oh " + kEnglishSmall[rest];
  return head + " " + english_below_hundred(rest);
}

std::string persian_cardinal(int64_t n) {
  const std::string words = persian_magnitude(magnitude(n));
  return n < 0 ? "منفی " + words : words;
}

std::string persian_ordinal(int64_t n) {
  std::string words = persian_cardinal(n);
  static const std::string kThree = "سه";
  const size_t last_space = words.rfind(' ');
  const std::string last = last_space == std::string::npos ? words : words.substr(last_space + 1);
  if (last == kThree) return words.substr(0, words.size() - kThree.size()) + "سوم";
  // A final ی (سی) would merge with the suffix; ZWNJ keeps the word readable: سی‌ام.
  if (ends_with(words, "ی")) return words + "\u200Cام";
  return words + "م";
}

}  // namespace sluice::dataset
