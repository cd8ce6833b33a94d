// Text stages of prep: number words, language detection, normalisation, vocabularies, phonemes.
// Expected phonemes are espeak-ng 1.51's (Debian bookworm), checked against `espeak-ng -q --ipa`.
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "dataset/language.h"
#include "dataset/number_words.h"
#include "dataset/phonemizer.h"
#include "dataset/text_normalizer.h"
#include "dataset/vocabulary.h"

namespace sluice::dataset {
namespace {

using json = nlohmann::json;

std::string normalize(std::string_view text, std::string_view language, TextConfig config = {}) {
  return TextNormalizer(config).normalize(text, language);
}

// The DataError message for invalid input, or "" when none was thrown.
std::string utf8_error(std::string_view text) {
  try {
    normalize(text, "en");
  } catch (const DataError& error) {
    return error.what();
  }
  return "";
}

// ------------------------------------------------------------------------------------------------
// number_words.h

TEST(NumberWords, EnglishCardinal) {
  EXPECT_EQ(english_cardinal(0), "zero");
  EXPECT_EQ(english_cardinal(13), "thirteen");
  EXPECT_EQ(english_cardinal(21), "twenty-one");
  EXPECT_EQ(english_cardinal(100), "one hundred");
  EXPECT_EQ(english_cardinal(101), "one hundred one");
  EXPECT_EQ(english_cardinal(1234), "one thousand two hundred thirty-four");
  EXPECT_EQ(english_cardinal(1'000'000), "one million");
  EXPECT_EQ(english_cardinal(2'000'000'001), "two billion one");
  EXPECT_EQ(english_cardinal(-5), "minus five");
  EXPECT_EQ(english_cardinal(std::numeric_limits<int64_t>::max()),
            "nine quintillion two hundred twenty-three quadrillion three hundred seventy-two "
            "trillion thirty-six billion eight hundred fifty-four million seven hundred "
            "seventy-five thousand eight hundred seven");
  EXPECT_EQ(english_cardinal(std::numeric_limits<int64_t>::min()),
            "minus nine quintillion two hundred twenty-three quadrillion three hundred seventy-two "
            "trillion thirty-six billion eight hundred fifty-four million seven hundred "
            "seventy-five thousand eight hundred eight");
}

TEST(NumberWords, EnglishOrdinal) {
  EXPECT_EQ(english_ordinal(1), "first");
  EXPECT_EQ(english_ordinal(2), "second");
  EXPECT_EQ(english_ordinal(3), "third");
  EXPECT_EQ(english_ordinal(4), "fourth");
  EXPECT_EQ(english_ordinal(5), "fifth");
  EXPECT_EQ(english_ordinal(8), "eighth");
  EXPECT_EQ(english_ordinal(9), "ninth");
  EXPECT_EQ(english_ordinal(12), "twelfth");
  EXPECT_EQ(english_ordinal(20), "twentieth");
  EXPECT_EQ(english_ordinal(22), "twenty-second");
  EXPECT_EQ(english_ordinal(103), "one hundred third");
  EXPECT_EQ(english_ordinal(1000), "one thousandth");
}

TEST(NumberWords, EnglishYear) {
  EXPECT_EQ(english_year(1984), "nineteen eighty-four");
  EXPECT_EQ(english_year(1900), "nineteen hundred");
  EXPECT_EQ(english_year(1905), "nineteen oh five");
  EXPECT_EQ(english_year(1066), "ten sixty-six");
  EXPECT_EQ(english_year(2000), "two thousand");
  EXPECT_EQ(english_year(2005), "two thousand five");
  EXPECT_EQ(english_year(2010), "twenty ten");
  EXPECT_EQ(english_year(2024), "twenty twenty-four");
  EXPECT_EQ(english_year(999), "nine hundred ninety-nine");
}

TEST(NumberWords, PersianCardinal) {
  EXPECT_EQ(persian_cardinal(0), "صفر");
  EXPECT_EQ(persian_cardinal(15), "پانزده");
  EXPECT_EQ(persian_cardinal(25), "بیست و پنج");
  EXPECT_EQ(persian_cardinal(100), "صد");
  EXPECT_EQ(persian_cardinal(205), "دویست و پنج");
  EXPECT_EQ(persian_cardinal(1000), "هزار");
  EXPECT_EQ(persian_cardinal(1234), "هزار و دویست و سی و چهار");
  EXPECT_EQ(persian_cardinal(2000), "دو هزار");
  EXPECT_EQ(persian_cardinal(101'000), "صد و یک هزار");
  EXPECT_EQ(persian_cardinal(1'000'000), "یک میلیون");
  EXPECT_EQ(persian_cardinal(3'500'000'000), "سه میلیارد و پانصد میلیون");
  EXPECT_EQ(persian_cardinal(-7), "منفی هفت");
  EXPECT_FALSE(persian_cardinal(std::numeric_limits<int64_t>::min()).empty());
}

TEST(NumberWords, PersianOrdinal) {
  EXPECT_EQ(persian_ordinal(1), "یکم");
  EXPECT_EQ(persian_ordinal(2), "دوم");
  EXPECT_EQ(persian_ordinal(3), "سوم");
  EXPECT_EQ(persian_ordinal(4), "چهارم");
  EXPECT_EQ(persian_ordinal(23), "بیست و سوم");
  EXPECT_EQ(persian_ordinal(30), "سی\u200Cام");
  EXPECT_EQ(persian_ordinal(100), "صدم");
}

// ------------------------------------------------------------------------------------------------
// language.h

TEST(DetectLanguage, FromScript) {
  EXPECT_EQ(detect_language("Hello world"), "en");
  EXPECT_EQ(detect_language("می\u200Cخواهم"), "fa");        // Persian yeh
  EXPECT_EQ(detect_language("کتاب"), "fa");                  // Persian kaf
  EXPECT_EQ(detect_language("پدر"), "fa");                   // پ
  EXPECT_EQ(detect_language("سال ۱۴۰۲"), "fa");             // Persian digits
  EXPECT_EQ(detect_language("كتاب"), "ar");                  // Arabic kaf
  // Arabic yeh and kaf only, but a ZWNJ joining a prefix: Persian orthography.
  EXPECT_EQ(detect_language("مي\u200Cخواهيم برويم"), "fa");
  EXPECT_EQ(detect_language("مرحبا بالعالم"), "ar");
  EXPECT_EQ(detect_language("Привет мир"), "und");
  EXPECT_EQ(detect_language(""), "und");
  EXPECT_EQ(detect_language("123 !?"), "und");
}

TEST(DetectLanguage, MajorityScriptWins) {
  EXPECT_EQ(detect_language("hello world پدر"), "en");
  EXPECT_EQ(detect_language("پدر و مادر OK"), "fa");
}

TEST(DetectLanguage, SkipsInvalidBytes) {
  EXPECT_EQ(detect_language("hello\xFF world"), "en");
}

TEST(DetectLanguage, PrimaryLanguage) {
  EXPECT_EQ(primary_language("en-US"), "en");
  EXPECT_EQ(primary_language("en_gb"), "en");
  EXPECT_EQ(primary_language("FA"), "fa");
}

TEST(DetectLanguage, LanguageCodes) {
  for (const char* code : {"en", "fa", "fas", "pt-BR", "zh_Hant_TW", "FA", "sr-Latn-RS"}) {
    EXPECT_TRUE(is_language_code(code)) << code;
  }
  for (const char* code : {"", "e", "engl", "<script>", "en-", "en--US", "en US", "en-toolongsubtag", "12", "e\x1b"}) {
    EXPECT_FALSE(is_language_code(code)) << code;
  }
}

// ------------------------------------------------------------------------------------------------
// text_normalizer.h: every language

TEST(TextNormalizer, CollapsesAndTrimsUnicodeSpaces) {
  EXPECT_EQ(normalize("  Hello,\t\n  world!\u00A0\u3000\u2028 ", "en"), "hello, world!");
  EXPECT_EQ(normalize(" \t\n ", "en"), "");
}

TEST(TextNormalizer, RemovesControlAndFormatCharacters) {
  EXPECT_EQ(normalize(std::string("a\x07" "b\0c", 5), "en"), "abc");
  EXPECT_EQ(normalize("\xEF\xBB\xBFhello", "en"), "hello");               // BOM
  EXPECT_EQ(normalize("he\u200Ello wo\u00ADrld\u200D", "en"), "hello world");  // LRM, soft hyphen, ZWJ
}

TEST(TextNormalizer, AppliesNfkc) {
  EXPECT_EQ(normalize("ＨＥＬＬＯ ｗｏｒｌｄ", "en"), "hello world");  // full-width
  EXPECT_EQ(normalize("\uFB01ne \uFB02ow", "en"), "fine flow");         // ﬁ ﬂ ligatures
  EXPECT_EQ(normalize("e\u0301", "en"), "\u00E9");                      // composed
  EXPECT_EQ(normalize("\uFEFB", "fa"), "لا");                           // lam-alef ligature
}

TEST(TextNormalizer, FoldsTypographicPunctuation) {
  EXPECT_EQ(normalize("\u201CDon\u2019t\u201D \u2014 he said\u2026", "en"),
            "\"don't\" - he said...");
}

TEST(TextNormalizer, OtherLanguagesGetOnlyTheCommonSteps) {
  EXPECT_EQ(normalize("  Über 3 Äpfel ", "de"), "über 3 äpfel");
}

TEST(TextNormalizer, InvalidUtf8NamesTheByteOffset) {
  EXPECT_NE(utf8_error("ab\xFF" "cd").find("byte offset 2"), std::string::npos);
  EXPECT_NE(utf8_error("abc\xE2\x82").find("byte offset 3"), std::string::npos);  // truncated
  EXPECT_NE(utf8_error("\xC0\xAF").find("byte offset 0"), std::string::npos);     // overlong
  EXPECT_NE(utf8_error("x\xED\xA0\x80").find("byte offset 1"), std::string::npos);  // surrogate
  EXPECT_EQ(utf8_error("fine"), "");
}

// ------------------------------------------------------------------------------------------------
// text_normalizer.h: English

TEST(TextNormalizerEnglish, Abbreviations) {
  EXPECT_EQ(normalize("Mr. and Mrs. Smith met Dr. Jones, Jr. at St. Paul's.", "en"),
            "mister and missus smith met doctor jones, junior at saint paul's.");
  EXPECT_EQ(normalize("apples, pears, etc.", "en"), "apples, pears, et cetera.");
  EXPECT_EQ(normalize("the dr said", "en"), "the dr said");  // needs the period
  EXPECT_EQ(normalize("Dr. Who", "en", {false, true, true}), "Doctor Who");
  EXPECT_EQ(normalize("Dr. Who", "en", {true, true, false}), "dr. who");
}

TEST(TextNormalizerEnglish, Integers) {
  EXPECT_EQ(normalize("I have 3 cats and 1,234 dogs.", "en"),
            "i have three cats and one thousand two hundred thirty-four dogs.");
  EXPECT_EQ(normalize("1,000,000 stars", "en"), "one million stars");
  EXPECT_EQ(normalize("12345", "en"), "twelve thousand three hundred forty-five");
  EXPECT_EQ(normalize("it was -5 outside", "en"), "it was minus five outside");
  EXPECT_EQ(normalize("agent 007", "en"), "agent zero zero seven");
  EXPECT_EQ(normalize("mp3 player", "en"), "mp three player");
}

TEST(TextNormalizerEnglish, DecimalsAndPercent) {
  EXPECT_EQ(normalize("pi is 3.14", "en"), "pi is three point one four");
  EXPECT_EQ(normalize("3.5 kg", "en"), "three point five kg");
  EXPECT_EQ(normalize("50% and 3.5%", "en"), "fifty percent and three point five percent");
}

TEST(TextNormalizerEnglish, Ordinals) {
  EXPECT_EQ(normalize("the 1st, 2nd, 3rd, 11th and 22nd of May", "en"),
            "the first, second, third, eleventh and twenty-second of may");
}

TEST(TextNormalizerEnglish, Currency) {
  EXPECT_EQ(normalize("$3.50", "en"), "three dollars and fifty cents");
  EXPECT_EQ(normalize("$1", "en"), "one dollar");
  EXPECT_EQ(normalize("$0.01", "en"), "one cent");
  EXPECT_EQ(normalize("$3.5", "en"), "three dollars and fifty cents");
  EXPECT_EQ(normalize("$1,000.", "en"), "one thousand dollars.");
  EXPECT_EQ(normalize("$5 million", "en"), "five million dollars");
  EXPECT_EQ(normalize("£2.05", "en"), "two pounds and five pence");
  EXPECT_EQ(normalize("€20", "en"), "twenty euros");
}

TEST(TextNormalizerEnglish, Times) {
  EXPECT_EQ(normalize("at 10:30, 7:05 or 12:00.", "en"), "at ten thirty, seven oh five or twelve o'clock.");
}

TEST(TextNormalizerEnglish, Years) {
  EXPECT_EQ(normalize("In 1984 and 2024", "en"), "in nineteen eighty-four and twenty twenty-four");
  EXPECT_EQ(normalize("by 2005", "en"), "by two thousand five");
  EXPECT_EQ(normalize("the 1980s", "en"), "the nineteen eighties");
}

TEST(TextNormalizerEnglish, NumbersCanStayDigits) {
  EXPECT_EQ(normalize("3 cats", "en", {true, false, true}), "3 cats");
}

// ------------------------------------------------------------------------------------------------
// text_normalizer.h: Persian and Arabic

TEST(TextNormalizerPersian, UnifiesArabicYehAndKaf) {
  EXPECT_EQ(normalize("كتاب علي", "fa"), "کتاب علی");
  EXPECT_EQ(normalize("موسى", "fa"), "موسی");  // alef maksura
}

TEST(TextNormalizerPersian, SpellsPersianArabicIndicAndAsciiDigits) {
  EXPECT_EQ(normalize("۲۵ کتاب", "fa"), "بیست و پنج کتاب");
  EXPECT_EQ(normalize("٢٥ کتاب", "fa"), "بیست و پنج کتاب");
  EXPECT_EQ(normalize("25 کتاب", "fa"), "بیست و پنج کتاب");
  EXPECT_EQ(normalize("سال ۱۴۰۲", "fa"), "سال هزار و چهارصد و دو");
  EXPECT_EQ(normalize("سال۱۲۳۴", "fa"), "سال هزار و دویست و سی و چهار");
  EXPECT_EQ(normalize("۱٬۰۰۰ تومان", "fa"), "هزار تومان");
  EXPECT_EQ(normalize("۳٫۵", "fa"), "سه ممیز پنج");
  EXPECT_EQ(normalize("۳٫۰۵", "fa"), "سه ممیز صفر پنج");
  EXPECT_EQ(normalize("۲۵٪", "fa"), "بیست و پنج درصد");
  EXPECT_EQ(normalize("۰۹۱۲", "fa"), "صفر نه یک دو");
}

TEST(TextNormalizerPersian, KeepsZwnj) {
  const std::string word = "می\u200Cخواهم";
  EXPECT_EQ(normalize(word, "fa"), word);
  EXPECT_EQ(normalize("کتاب\u200C\u200Cها", "fa"), "کتاب\u200Cها");     // repeats collapse
  EXPECT_EQ(normalize("\u200Cمی\u200C خواهم\u200C", "fa"), "می خواهم");  // next to a space or an end
}

TEST(TextNormalizerPersian, RemovesTatweelAndHarakat) {
  EXPECT_EQ(normalize("ســـلام", "fa"), "سلام");
  EXPECT_EQ(normalize("مُحَمَّد", "fa"), "محمد");
  EXPECT_EQ(normalize("كَتَبَ", "fa"), "کتب");
}

TEST(TextNormalizerPersian, KeepsHamzaForms) {
  EXPECT_EQ(normalize("خانهٔ مسئله مؤمن", "fa"), "خانهٔ مسئله مؤمن");
}

TEST(TextNormalizerPersian, FoldsArabicPunctuation) {
  EXPECT_EQ(normalize("سلام، دنیا؟ خوبی؛", "fa"), "سلام, دنیا? خوبی;");
}

TEST(TextNormalizerArabic, KeepsArabicLettersAndDigits) {
  EXPECT_EQ(normalize("كَتَبَ علي ٢٥", "ar"), "كتب علي ٢٥");
}

// ------------------------------------------------------------------------------------------------
// vocabulary.h

TEST(Vocabulary, BuiltinSizesAndVersions) {
  const Vocabulary characters = Vocabulary::builtin_characters();
  EXPECT_EQ(characters.version(), "chars-v1");
  EXPECT_EQ(characters.kind(), "characters");
  EXPECT_EQ(characters.size(), 87u);
  const Vocabulary phonemes = Vocabulary::builtin_phonemes();
  EXPECT_EQ(phonemes.version(), "ipa-v1");
  EXPECT_EQ(phonemes.kind(), "phonemes");
  EXPECT_EQ(phonemes.size(), 75u);
  EXPECT_EQ(characters.symbol(Vocabulary::pad_id), "<pad>");
  EXPECT_EQ(characters.symbol(Vocabulary::eos_id), "<eos>");
  EXPECT_EQ(characters.symbol(4), " ");
  EXPECT_EQ(characters.symbol(16), "a");
  EXPECT_THROW(characters.symbol(87), std::out_of_range);
}

TEST(Vocabulary, EncodesOneIdPerCodePoint) {
  const Vocabulary vocabulary = Vocabulary::builtin_characters();
  UnknownCounts unknown;
  EXPECT_EQ(vocabulary.encode("hi, a.", unknown), (std::vector<int32_t>{23, 24, 6, 4, 16, 5}));
  EXPECT_EQ(vocabulary.encode("می\u200Cخواهم", unknown),
            (std::vector<int32_t>{70, 74, 75, 51, 72, 42, 73, 70}));
  EXPECT_EQ(vocabulary.encode("a", unknown, true), (std::vector<int32_t>{2, 16, 3}));
  EXPECT_EQ(vocabulary.encode("", unknown), std::vector<int32_t>{});
  EXPECT_TRUE(unknown.empty());
}

TEST(Vocabulary, CountsUnknownCodePoints) {
  const Vocabulary vocabulary = Vocabulary::builtin_characters();
  UnknownCounts unknown;
  EXPECT_EQ(vocabulary.encode("a\U0001F600b\U0001F600", unknown),
            (std::vector<int32_t>{16, 1, 17, 1}));
  vocabulary.encode("A", unknown);
  EXPECT_EQ(unknown, (UnknownCounts{{U'\U0001F600', 2}, {U'A', 1}}));
  EXPECT_THROW(vocabulary.encode("a\xFF", unknown), DataError);
}

TEST(Vocabulary, DescribesUnknownForAReport) {
  EXPECT_EQ(describe_unknown({{U'\U0001F600', 2}, {U'\u00E9', 1}, {U'\u0301', 3}, {U'\u00A0', 1}}),
            "U+0301 \"\u25CC\u0301\" x3, U+1F600 \"\U0001F600\" x2, U+00A0 x1, U+00E9 \"\u00E9\" x1");
  EXPECT_EQ(describe_unknown({}), "");
}

TEST(Vocabulary, JsonRoundTrip) {
  for (const Vocabulary& vocabulary : {Vocabulary::builtin_characters(), Vocabulary::builtin_phonemes()}) {
    const json j = vocabulary.to_json();
    EXPECT_EQ(j["version"], vocabulary.version());
    EXPECT_EQ(j["symbols"].size(), vocabulary.size());
    const Vocabulary back = Vocabulary::from_json(json::parse(j.dump()));
    EXPECT_EQ(back, vocabulary);
    EXPECT_EQ(back.to_json(), j);
  }
}

TEST(Vocabulary, FromJsonRejectsBadTables) {
  const json good = Vocabulary::builtin_characters().to_json();
  json changed = good;  // claims chars-v1, but one id means another symbol
  changed["symbols"][16] = "ä";
  EXPECT_THROW(Vocabulary::from_json(changed), CacheError);
  json renamed = changed;  // the same table under its own version is fine
  renamed["version"] = "chars-test";
  EXPECT_EQ(Vocabulary::from_json(renamed).symbol(16), "ä");
  json duplicate = renamed;
  duplicate["symbols"][17] = "ä";
  EXPECT_THROW(Vocabulary::from_json(duplicate), CacheError);
  json two_code_points = renamed;
  two_code_points["symbols"][17] = "ab";
  EXPECT_THROW(Vocabulary::from_json(two_code_points), CacheError);
  json bad_special = renamed;
  bad_special["symbols"][1] = "<oov>";
  EXPECT_THROW(Vocabulary::from_json(bad_special), CacheError);
  EXPECT_THROW(Vocabulary::from_json(json::array()), CacheError);
}

TEST(Vocabulary, CharactersCoverNormalizedText) {
  const Vocabulary vocabulary = Vocabulary::builtin_characters();
  UnknownCounts unknown;
  vocabulary.encode(normalize("Dr. Smith paid $3.50 on May 1st, 1984 (\u201Cfine\u201D)!", "en"), unknown);
  vocabulary.encode(normalize("ژاله ۲۵ كتاب و ٣ دفتر خرید؛ آیا می\u200Cخواهی؟ خانهٔ مسئله", "fa"), unknown);
  vocabulary.encode(normalize("مرحبا بالعالم يا صديقي، هذه مدرسة على", "ar"), unknown);
  EXPECT_TRUE(unknown.empty()) << describe_unknown(unknown);
}

// ------------------------------------------------------------------------------------------------
// phonemizer.h

TEST(Phonemizer, EnglishHelloWorld) {
  const Phonemizer phonemizer;
  EXPECT_EQ(phonemizer.phonemize("hello world", "en"), "həlˈəʊ wˈɜːld");  // = espeak-ng -v en --ipa
  EXPECT_EQ(phonemizer.phonemize("hello world", "en-US"), "həlˈoʊ wˈɜːld");
  EXPECT_EQ(phonemizer.phonemize("", "en"), "");
}

TEST(Phonemizer, KeepsClausePunctuation) {
  const Phonemizer phonemizer;
  EXPECT_EQ(phonemizer.phonemize("hello, world! how are you?", "en"),
            "həlˈəʊ, wˈɜːld! hˈaʊ ɑː juː?");
}

TEST(Phonemizer, PersianIsDeterministic) {
  const Phonemizer phonemizer;
  const std::string first = phonemizer.phonemize("سلام دنیا", "fa");
  EXPECT_EQ(first, "salˈɑm dˈonjɑ");  // = espeak-ng -v fa --ipa
  phonemizer.phonemize("hello", "en");  // switching voices in between changes nothing
  EXPECT_EQ(phonemizer.phonemize("سلام دنیا", "fa"), first);
  EXPECT_FALSE(phonemizer.phonemize("می\u200Cخواهم", "fa").empty());
}

TEST(Phonemizer, DropsLanguageSwitchMarkers) {
  const Phonemizer phonemizer;
  EXPECT_EQ(phonemizer.phonemize("من hello می\u200Cخواهم", "fa"), "man həlˈəʊ mixˈɑham");
}

TEST(Phonemizer, VoicesForLanguages) {
  EXPECT_EQ(Phonemizer::voice_for("en"), "en");
  EXPECT_EQ(Phonemizer::voice_for("en_US"), "en-us");
  EXPECT_EQ(Phonemizer::voice_for("en-AU"), "en");
  EXPECT_EQ(Phonemizer::voice_for("fa-IR"), "fa");
  EXPECT_EQ(Phonemizer::voice_for("und"), "");
}

TEST(Phonemizer, UnknownLanguageIsNamed) {
  const Phonemizer phonemizer;
  try {
    phonemizer.phonemize("hello", "xx");
    FAIL() << "expected DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("\"xx\""), std::string::npos) << error.what();
  }
  EXPECT_THROW(phonemizer.phonemize("a\xFF", "en"), DataError);
}

TEST(Phonemizer, DataDirectory) {
  const Phonemizer first;
  EXPECT_EQ(first.engine_version().rfind("espeak-ng 1.", 0), 0u) << first.engine_version();
  // The resolved default, named explicitly, is the same directory: accepted.
  EXPECT_NO_THROW(Phonemizer{first.data_directory()});
  try {
    Phonemizer{"/nonexistent/espeak-ng-data"};
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/espeak-ng-data\" is not an espeak-ng data"),
              std::string::npos)
        << error.what();
  }
}

TEST(Phonemizer, PhonemeVocabularyCoversOutput) {
  const Phonemizer phonemizer;
  const Vocabulary vocabulary = Vocabulary::builtin_phonemes();
  UnknownCounts unknown;
  for (const auto& [text, language] : std::vector<std::pair<std::string, std::string>>{
           {"Dr. Smith paid $3.50 on May 1st, 1984; the quick brown fox jumps over the lazy dog!", "en"},
           {"Dr. Smith paid $3.50 on May 1st, 1984; the quick brown fox jumps over the lazy dog!", "en-us"},
           {"ژاله ۲۵ كتاب و ٣ دفتر خرید؛ آیا می\u200Cخواهی؟ قند غذا خانهٔ مسئله", "fa"},
           {"مرحبا بالعالم يا صديقي، هذه مدرسة", "ar"}}) {
    const std::string phonemes = phonemizer.phonemize(normalize(text, language), language);
    EXPECT_FALSE(phonemes.empty()) << language;
    vocabulary.encode(phonemes, unknown);
  }
  EXPECT_TRUE(unknown.empty()) << describe_unknown(unknown);
}

// Worker threads share one Phonemizer; the process-wide lock makes them take turns, so every
// result equals the single-threaded one.
TEST(Phonemizer, ThreadsGetTheSameResults) {
  const Phonemizer phonemizer;
  const std::vector<std::pair<std::string, std::string>> inputs{
      {"hello world", "en"}, {"سلام دنیا", "fa"}, {"the quick brown fox", "en-us"},
      {"کتاب\u200Cها را می\u200Cخوانم", "fa"}};
  std::vector<std::string> expected;
  for (const auto& [text, language] : inputs) expected.push_back(phonemizer.phonemize(text, language));

  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 25; ++round) {
        const size_t k = static_cast<size_t>(t + round) % inputs.size();
        if (phonemizer.phonemize(inputs[k].first, inputs[k].second) != expected[k]) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace sluice::dataset
