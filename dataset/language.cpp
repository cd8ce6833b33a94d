#include "dataset/language.h"

#include <cstdint>

#include <utf8proc.h>

namespace sluice::dataset {
namespace {

bool in(char32_t c, char32_t first, char32_t last) { return c >= first && c <= last; }

bool is_letter(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_arabic_script(char32_t c) {
  return in(c, 0x0600, 0x06FF) || in(c, 0x0750, 0x077F) || in(c, 0x08A0, 0x08FF) ||
         in(c, 0xFB50, 0xFDFF) || in(c, 0xFE70, 0xFEFF);
}

bool is_latin_script(char32_t c) {
  return c < 0x80 || in(c, 0x00C0, 0x024F) || in(c, 0x1E00, 0x1EFF) || in(c, 0x2C60, 0x2C7F) ||
         in(c, 0xA720, 0xA7FF) || in(c, 0xFF21, 0xFF3A) || in(c, 0xFF41, 0xFF5A);
}

bool is_arabic_script_digit(char32_t c) { return in(c, 0x0660, 0x0669) || in(c, 0x06F0, 0x06F9); }

// Letters and digits that Persian orthography uses and Arabic does not.
bool is_persian_only(char32_t c) {
  switch (c) {
    case 0x067E:  // پ
    case 0x0686:  // چ
    case 0x0698:  // ژ
    case 0x06AF:  // گ
    case 0x06CC:  // ی Persian yeh
    case 0x06A9:  // ک Persian kaf
      return true;
    default:
      return in(c, 0x06F0, 0x06F9);  // Persian digits
  }
}

}  // namespace

std::string detect_language(std::string_view utf8_text, std::string_view ambiguous_arabic_script) {
  int64_t arabic = 0;
  int64_t latin = 0;
  bool persian = false;
  bool arabic_only = false;
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(utf8_text.data());
  const auto size = static_cast<utf8proc_ssize_t>(utf8_text.size());
  for (utf8proc_ssize_t at = 0; at < size;) {
    utf8proc_int32_t code_point = 0;
    const utf8proc_ssize_t length = utf8proc_iterate(bytes + at, size - at, &code_point);
    if (length <= 0) {  // not UTF-8: skip the byte (see the header)
      ++at;
      continue;
    }
    at += length;
    const auto c = static_cast<char32_t>(code_point);
    // ZWNJ inside Arabic-script words is part of Persian orthography (می‌خواهم) and not of
    // Arabic, so it marks Persian text written with Arabic yeh and kaf.
    if (c == 0x200C) persian = persian || arabic > 0;
    if (is_arabic_script(c) && (is_letter(c) || is_arabic_script_digit(c))) {
      ++arabic;
      persian = persian || is_persian_only(c);
      arabic_only = arabic_only || c == 0x0629;  // teh marbuta
    } else if (is_latin_script(c) && is_letter(c)) {
      ++latin;
    }
  }
  if (arabic > 0 && arabic >= latin) {
    if (persian) return "fa";
    return arabic_only ? "ar" : std::string(ambiguous_arabic_script);
  }
  if (latin > 0) return "en";
  return "und";
}

std::string primary_language(std::string_view code) {
  std::string primary;
  for (const char c : code) {
    if (c == '-' || c == '_') break;
    primary += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return primary;
}

bool is_language_code(std::string_view code) {
  const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0;
  while (i < code.size() && letter(code[i])) ++i;
  if (i < 2 || i > 3) return false;
  while (i < code.size()) {
    if (code[i] != '-' && code[i] != '_') return false;
    const size_t start = ++i;
    while (i < code.size() && (letter(code[i]) || digit(code[i]))) ++i;
    if (i - start < 1 || i - start > 8) return false;
  }
  return true;
}

}  // namespace sluice::dataset
