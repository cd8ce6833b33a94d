#pragma once
// Numbers spelled out as words, for the text normaliser (text_normalizer.h). Every function takes
// the whole int64 range (INT64_MIN included) and never throws; negative numbers read "minus ..."
// (English) or "منفی ..." (Persian).
//
// English follows US usage without "and" and hyphenates the tens: 1234 -> "one thousand two hundred
// thirty-four". Persian joins every part with " و " and says "هزار", not "یک هزار", for 1000:
// 1234 -> "هزار و دویست و سی و چهار". Persian scales are the Iranian ones (میلیارد = 10^9).
#include <cstdint>
#include <string>

namespace sluice::dataset {

// 21 -> "twenty-one", 1000000 -> "one million".
std::string english_cardinal(int64_t n);

// 1 -> "first", 22 -> "twenty-second", 100 -> "one hundredth".
std::string english_ordinal(int64_t n);

// A number read as a year: 1984 -> "nineteen eighty-four", 1900 -> "nineteen hundred",
// 1905 -> "nineteen oh five", 2000 -> "two thousand", 2005 -> "two thousand five",
// 2024 -> "twenty twenty-four". Anything but 1000..9999 reads as a cardinal.
std::string english_year(int64_t year);

// 25 -> "بیست و پنج", 1000 -> "هزار", 2000000 -> "دو میلیون".
std::string persian_cardinal(int64_t n);

// The cardinal plus the ordinal suffix "م": 2 -> "دوم", 21 -> "بیست و یکم". Three becomes "سوم"
// and a number ending in "ی" takes "‌ام" (ZWNJ + ام): 30 -> "سی‌ام". 1 is "یکم", not "اول", so
// that it reads the same alone and in compounds.
std::string persian_ordinal(int64_t n);

}  // namespace sluice::dataset
