#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "dataset/audio.h"
#include "dataset/corpus.h"
#include "dataset/corpus_support.h"
#include "dataset/listing_encoding.h"
#include "dataset/mel.h"
#include "tests/dataset/corpus_replicas.h"

namespace sluice::dataset {
namespace {

namespace fs = std::filesystem;

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("sluice-corpus-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "wavs");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const fs::path& relative, const std::string& text) { std::ofstream(root_ / relative) << text; }
  // ROOT/metadata.csv and wavs/ with every problem a row can have (listed in
  // LjspeechRowsInOrderWithEveryListingProblem).
  void write_ljspeech_with_every_problem(const fs::path& folder) {
    fs::create_directories(folder / "wavs");
    write(folder / "metadata.csv",
          "a1|Raw one|Normalized one\n"
          "a2|Raw two|\n"
          "\n"
          "broken row without bars\n"
          "a1|again|again\n"
          "../../etc/passwd|escape|escape\n"
          "a3|   |   \n"
          "a4|x|y|z\n"
          "a5|Windows line|Windows line\r\n");
    for (const char* id : {"a1", "a2", "a3", "a4", "a5"}) write(folder / "wavs" / (std::string(id) + ".wav"), "");
  }
  // The sample corpus's Persian line that has no letter Persian alone uses, beside Persian rows.
  void write_persian_rows_one_without_persian_letters(const fs::path& folder) {
    fs::create_directories(folder / "wavs");
    write(folder / "metadata.csv",
          "fa1|امروز هوا آفتابی است|\n"
          "fa2|قطار تهران به مشهد حدود دوازده ساعت در راه است.|\n"
          "en1|Hello there.|\n");
    for (const char* id : {"fa1", "fa2", "en1"}) write(folder / "wavs" / (std::string(id) + ".wav"), "");
  }
  // ROOT/list.jsonl with defaults and every problem a line can have (JsonlFieldsDefaultsAndProblems).
  void write_jsonl_with_every_problem(const fs::path& folder) {
    fs::create_directories(folder / "wavs");
    write(folder / "list.jsonl",
          R"({"id":"x1","audio":"wavs/x1.flac","text":"hello","speaker":"s1","language":"en"})" "\n"
          R"({"id":"x2","audio":"wavs/x2.wav","text":"سلام"})" "\n"
          "not json\n"
          R"({"id":"x3","text":"no audio"})" "\n"
          R"({"id":"x4","audio":"../outside.wav","text":"t"})" "\n"
          R"({"id":"x5","audio":"/etc/hostname","text":"t"})" "\n"
          R"({"id":"x1","audio":"wavs/x1b.wav","text":"t"})" "\n"
          R"({"id":"x6","audio":"wavs/x6.wav","text":"t","speaker":7})" "\n");
  }

  fs::path root_;
};

TEST_F(CorpusTest, LjspeechRowsInOrderWithEveryListingProblem) {
  write_ljspeech_with_every_problem(root_);
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.format, "ljspeech");
  EXPECT_EQ(listing.recognised, "metadata.csv (LJSpeech)");
  ASSERT_EQ(listing.items.size(), 8u);  // the blank line is not a row

  EXPECT_EQ(listing.items[0].id, "a1");
  EXPECT_EQ(listing.items[0].text, "Normalized one");
  EXPECT_EQ(listing.items[0].audio, fs::weakly_canonical(root_) / "wavs" / "a1.wav");
  EXPECT_EQ(listing.items[0].source, "metadata.csv:1");
  EXPECT_FALSE(listing.items[0].reject.has_value());
  EXPECT_EQ(listing.items[1].text, "Raw two");  // empty normalized column falls back to raw

  EXPECT_EQ(listing.items[2].source, "metadata.csv:4");
  EXPECT_EQ(listing.items[2].reject, RejectReason::malformed_row);
  EXPECT_EQ(listing.items[2].text, "broken row without bars");  // what the reject shows
  EXPECT_EQ(listing.items[3].reject, RejectReason::duplicate_id);
  EXPECT_NE(listing.items[3].reject_detail.find("metadata.csv:1"), std::string::npos);
  EXPECT_EQ(listing.items[4].reject, RejectReason::path_escapes_root);
  EXPECT_EQ(listing.items[5].reject, RejectReason::empty_text);
  EXPECT_EQ(listing.items[6].reject, RejectReason::malformed_row);
  EXPECT_EQ(listing.items[7].text, "Windows line");
  EXPECT_FALSE(listing.items[7].reject.has_value());
}

TEST_F(CorpusTest, RawTextColumnOption) {
  write("metadata.csv", "a1|Raw one|Normalized one\n");
  CorpusOptions options;
  options.text_column = "raw";
  EXPECT_EQ(read_corpus(root_, options).items[0].text, "Raw one");
}

TEST_F(CorpusTest, JsonlFieldsDefaultsAndProblems) {
  write_jsonl_with_every_problem(root_);
  CorpusOptions options;
  options.speaker = "default-speaker";
  const CorpusListing listing = read_corpus(root_ / "list.jsonl", options);
  EXPECT_EQ(listing.format, "jsonl");
  ASSERT_EQ(listing.items.size(), 8u);
  EXPECT_EQ(listing.items[0].speaker, "s1");
  EXPECT_EQ(listing.items[0].language, "en");
  EXPECT_EQ(listing.items[0].audio, fs::weakly_canonical(root_) / "wavs" / "x1.flac");
  EXPECT_EQ(listing.items[1].speaker, "default-speaker");
  EXPECT_EQ(listing.items[1].language, "");
  EXPECT_EQ(listing.items[2].reject, RejectReason::malformed_row);
  EXPECT_EQ(listing.items[2].source, "list.jsonl:3");
  EXPECT_EQ(listing.items[3].reject, RejectReason::malformed_row);
  EXPECT_NE(listing.items[3].reject_detail.find("audio"), std::string::npos);
  EXPECT_EQ(listing.items[4].reject, RejectReason::path_escapes_root);
  EXPECT_EQ(listing.items[5].reject, RejectReason::path_escapes_root);
  EXPECT_EQ(listing.items[6].reject, RejectReason::duplicate_id);
  EXPECT_EQ(listing.items[7].reject, RejectReason::malformed_row);
}

TEST_F(CorpusTest, SymlinksInsideTheRootAreFollowedNotJudged) {
  // wavs/ linked to shared storage is a normal setup; only the path as written must stay inside.
  write("metadata.csv", "link|text|text\n");
  fs::create_symlink("/etc/hostname", root_ / "wavs" / "link.wav");
  EXPECT_FALSE(read_corpus(root_, CorpusOptions{}).items[0].reject.has_value());
}

TEST_F(CorpusTest, ALinkIsListedWithoutFollowingItAndADanglingOneIsMissingAudio) {
  // The listing takes links as they are (no stat per file); the probe and the decoder open them.
  write("metadata.csv", "gone|text|text\n");
  fs::create_symlink(root_ / "nowhere.wav", root_ / "wavs" / "gone.wav");
  const auto listing = read_corpus(root_, CorpusOptions{});
  ASSERT_EQ(listing.items.size(), 1u);
  EXPECT_EQ(listing.items[0].audio, (root_ / "wavs" / "gone.wav").lexically_normal());
  EXPECT_FALSE(listing.items[0].reject.has_value());
  try {
    sluice::dataset::probe_audio(listing.items[0].audio);
    FAIL() << "expected SampleRejected";
  } catch (const sluice::dataset::SampleRejected& rejected) {
    EXPECT_EQ(rejected.reason(), RejectReason::missing_audio);
    EXPECT_NE(std::string(rejected.what()).find("gone.wav"), std::string::npos) << rejected.what();
  }
}

TEST_F(CorpusTest, MissingOrUnrecognisedCorpusIsAClearError) {
  try {
    read_corpus(root_ / "nope", CorpusOptions{});
    FAIL() << "expected DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("does not exist"), std::string::npos);
  }
  EXPECT_THROW(read_corpus(root_, CorpusOptions{}), DataError);  // no metadata.csv
}


// ------------------------------------------------------------------ downloaded corpora, row by row

void expect_rows(const CorpusListing& listing, const std::vector<test::ExpectedRow>& rows) {
  ASSERT_EQ(listing.items.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const CorpusItem& item = listing.items[i];
    const test::ExpectedRow& row = rows[i];
    SCOPED_TRACE("row " + std::to_string(i) + " (" + item.source + ")");
    EXPECT_EQ(item.id, row.id);
    EXPECT_EQ(item.speaker, row.speaker);
    EXPECT_EQ(item.language, row.language);
    EXPECT_EQ(item.text, row.text);
    EXPECT_EQ(item.reject ? to_string(*item.reject) : "", row.reject) << item.reject_detail;
    if (!row.audio.empty()) {
      EXPECT_EQ(item.audio, listing.root / row.audio);
    }
  }
}

MelConfig mel_config() { return MelConfig{}; }

std::vector<float> mel_of(const fs::path& audio) {
  const MelExtractor extractor(mel_config());
  const std::vector<float> samples = load_audio(audio, mel_config().sample_rate);
  std::vector<float> mel;
  extractor.compute(samples.data(), static_cast<int64_t>(samples.size()), mel);
  return mel;
}

// Every kept item's mels equal those of the same audio stored as WAV: the decoded samples at the
// file's own rate, written as float WAV, then both read through load_audio (and its resampler).
void expect_mels_equal_wav(const CorpusListing& listing, const fs::path& scratch) {
  int compared = 0;
  for (const auto& item : listing.items) {
    if (item.reject) continue;
    SCOPED_TRACE(item.audio.string());
    const int rate = probe_audio(item.audio).sample_rate;
    const fs::path wav = scratch / "as-wav" / (item.id + ".wav");
    test::write_samples(wav, SF_FORMAT_WAV | SF_FORMAT_FLOAT, load_audio(item.audio, rate), rate);
    const auto mel = mel_of(item.audio);
    ASSERT_FALSE(mel.empty());
    EXPECT_EQ(mel, mel_of(wav));  // bit-identical floats
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST_F(CorpusTest, LjspeechWithEveryAudioFormatBomAndCrlf) {
  fs::remove_all(root_);
  const auto rows = test::make_ljspeech_replica(root_);
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.format, "ljspeech");
  expect_rows(listing, rows);
  EXPECT_EQ(listing.items[5].source, "metadata.csv:6");
  ASSERT_EQ(listing.notes.size(), 1u);  // the id stored as .wav and .flac
  EXPECT_NE(listing.notes[0].find("took LJ001-0004.wav, not LJ001-0004.flac"), std::string::npos)
      << listing.notes[0];
  EXPECT_NE(listing.items[6].reject_detail.find("LJ001-0006.{wav,flac,ogg,opus,mp3}"), std::string::npos)
      << listing.items[6].reject_detail;
  expect_mels_equal_wav(listing, root_.parent_path() / (root_.filename().string() + "-scratch"));
  fs::remove_all(root_.parent_path() / (root_.filename().string() + "-scratch"));
}

TEST_F(CorpusTest, LibrittsTextFilesAndTransTsv) {
  fs::remove_all(root_);
  const auto rows = test::make_libritts_replica(root_);
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.format, "libritts");
  EXPECT_EQ(listing.recognised.rfind("LibriTTS transcripts in train-clean-100/", 0), 0u) << listing.recognised;
  expect_rows(listing, rows);
  EXPECT_EQ(listing.items[0].source, "train-clean-100/103/1240/103_1240_000000_000000.normalized.txt");
  EXPECT_EQ(listing.items[0].metadata.at("chapter"), "1240");
  EXPECT_EQ(listing.items[3].source, "train-clean-100/1034/121119/1034_121119.trans.tsv:1");
  EXPECT_EQ(listing.items[3].metadata.at("chapter"), "121119");

  CorpusOptions raw;
  raw.text_column = "raw";
  raw.format = "libritts";
  const CorpusListing original = read_corpus(root_ / "train-clean-100", raw);
  EXPECT_EQ(original.recognised, "set by corpus.format");
  ASSERT_EQ(original.items.size(), rows.size());
  EXPECT_EQ(original.items[0].text, "Chapter 1 Mrs. Rachel Lynde is surprised.");
  EXPECT_EQ(original.items[1].text, "Mrs. Rachel Lynde lived");
  EXPECT_EQ(original.items[3].text, "The 3 boys");
  expect_mels_equal_wav(listing, root_ / "scratch");
}

TEST_F(CorpusTest, VctkChosenMicSpeakersAndMissingTranscripts) {
  fs::remove_all(root_);
  const auto rows = test::make_vctk_replica(root_);
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.format, "vctk");
  EXPECT_EQ(listing.recognised, "wav48_silence_trimmed/ and txt/ (VCTK 0.92)");
  expect_rows(listing, rows);
  EXPECT_EQ(listing.items[0].source, "txt/p225/p225_001.txt");
  EXPECT_EQ(listing.items[4].reject_detail, "no transcript txt/p315/p315_001.txt");

  CorpusOptions mic2;
  mic2.vctk_mic = "mic2";
  const CorpusListing second = read_corpus(root_, mic2);
  ASSERT_EQ(second.items.size(), 4u);  // p315 has neither mic2 audio nor text: nothing to list
  EXPECT_EQ(second.items[0].audio, second.root / "wav48_silence_trimmed/p225/p225_001_mic2.flac");
  EXPECT_EQ(second.items[2].audio, second.root / "wav48_silence_trimmed/p226/p226_001_mic2.flac");
  EXPECT_EQ(second.items[3].reject, RejectReason::missing_audio);
  expect_mels_equal_wav(listing, root_ / "scratch");
}

// The reader takes which transcripts exist from txt/SPEAKER/'s listing (no stat per file): a
// transcript that is a link counts when it leads to a file, and a dangling one is no transcript,
// as when each file was asked for.
// inside() decides the usual root/SOME/FILE on the strings and everything else by normalising both
// paths: the two ways agree.
TEST(CorpusInside, PlainPathsAndDotComponents) {
  using sluice::dataset::corpus_detail::inside;
  const fs::path root = "/data/corpus";
  EXPECT_TRUE(inside(root, "/data/corpus/wavs/a.wav"));
  EXPECT_TRUE(inside(root, "/data/corpus/a.wav"));
  EXPECT_TRUE(inside(root, "/data/corpus/wavs/../a.wav"));
  EXPECT_TRUE(inside(root, "/data/corpus/./wavs/a.wav"));
  EXPECT_TRUE(inside(root, "/data/corpus/..a/b.wav"));  // a name that starts with dots, not ".."
  EXPECT_FALSE(inside(root, "/data/corpus/../other/a.wav"));
  EXPECT_FALSE(inside(root, "/data/corpus/wavs/../../a.wav"));
  EXPECT_FALSE(inside(root, "/data/corpus-2/a.wav"));
  EXPECT_TRUE(inside(root, "/data/corpus"));  // "." relative to the root, as it always was
  EXPECT_FALSE(inside(root, "/elsewhere/a.wav"));
  EXPECT_TRUE(inside("/data/x/../corpus", "/data/corpus/a.wav"));
  EXPECT_TRUE(inside("/data/corpus/", "/data/corpus/a.wav"));
}

TEST_F(CorpusTest, VctkTranscriptsGivenAsLinks) {
  fs::remove_all(root_);
  test::make_vctk_replica(root_);
  const fs::path elsewhere = root_ / "elsewhere";
  test::write_text(elsewhere / "p225_002.txt", "Read through a link.\n");
  fs::remove(root_ / "txt" / "p225" / "p225_002.txt");
  fs::create_symlink(elsewhere / "p225_002.txt", root_ / "txt" / "p225" / "p225_002.txt");
  fs::create_directories(root_ / "txt" / "p315");
  fs::create_symlink(root_ / "nowhere" / "p315_001.txt", root_ / "txt" / "p315" / "p315_001.txt");
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  ASSERT_EQ(listing.items.size(), 5u);
  EXPECT_EQ(listing.items[1].id, "p225_002");
  EXPECT_FALSE(listing.items[1].reject.has_value());
  EXPECT_EQ(listing.items[1].text, "Read through a link.");
  EXPECT_EQ(listing.items[1].source, "txt/p225/p225_002.txt");
  EXPECT_EQ(listing.items[4].id, "p315_001");
  EXPECT_EQ(listing.items[4].reject, RejectReason::missing_text);
  EXPECT_EQ(listing.items[4].reject_detail, "no transcript txt/p315/p315_001.txt");
  EXPECT_EQ(listing.items[4].source, "wav48_silence_trimmed/p315/p315_001_mic1.flac");
}

TEST_F(CorpusTest, CommonVoicePersianValidatedTsv) {
  fs::remove_all(root_);
  const fs::path corpus = root_ / "cv-corpus-17.0-2024-03-15" / "fa";
  const auto rows = test::make_commonvoice_replica(corpus);
  const CorpusListing listing = read_corpus(corpus, CorpusOptions{});
  EXPECT_EQ(listing.format, "commonvoice");
  EXPECT_EQ(listing.recognised, "validated.tsv and clips/ (Common Voice, locale fa)");
  expect_rows(listing, rows);
  EXPECT_EQ(listing.items[0].source, "validated.tsv:2");
  EXPECT_EQ(listing.items[0].metadata.at("up_votes"), "2");
  EXPECT_EQ(listing.items[1].metadata.at("down_votes"), "1");
  EXPECT_EQ(listing.items[4].source, "validated.tsv:6");

  // Any split: the file itself as corpus.path, or corpus.split.
  EXPECT_EQ(read_corpus(corpus / "validated.tsv", CorpusOptions{}).items.size(), rows.size());
  CorpusOptions train;
  train.split = "train.tsv";
  EXPECT_TRUE(read_corpus(corpus, train).items.empty());
  expect_mels_equal_wav(listing, root_ / "scratch");
}

TEST_F(CorpusTest, CommonVoiceOlderReleaseTakesTheLanguageFromTheFolder) {
  // Releases before 2022 have no locale column; the folder is named after the language.
  const fs::path corpus = root_ / "en";
  fs::create_directories(corpus / "clips");
  write("en/validated.tsv",
        test::kBom + "client_id\tpath\tsentence\tup_votes\tdown_votes\tage\tgender\taccent\r\n"
                     "c1\tcommon_voice_en_1.mp3\tHello there.\t2\t0\t\t\t\r\n");
  const CorpusListing listing = read_corpus(corpus, CorpusOptions{});
  ASSERT_EQ(listing.items.size(), 1u);
  EXPECT_EQ(listing.items[0].language, "en");
  EXPECT_EQ(listing.items[0].speaker, "c1");
  EXPECT_EQ(listing.items[0].text, "Hello there.");
}

TEST_F(CorpusTest, PersianRowsWithoutPersianLettersArePersianInAPersianCorpus) {
  write_persian_rows_one_without_persian_letters(root_);
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.items[0].language, "");  // detected at prep: it has Persian letters
  EXPECT_EQ(listing.items[1].language, "fa");
  EXPECT_EQ(listing.items[2].language, "");
  ASSERT_EQ(listing.notes.size(), 1u);
  EXPECT_NE(listing.notes[0].find("metadata.csv:2"), std::string::npos) << listing.notes[0];

  // The declared language wins.
  CorpusOptions arabic;
  arabic.language = "ar";
  EXPECT_EQ(read_corpus(root_, arabic).items[1].language, "ar");
}

TEST_F(CorpusTest, ArabicCorpusStaysArabic) {
  write("metadata.csv",
        "ar1|مرحبا بالعالم|\n"
        "ar2|هذه مدرسة جميلة|\n");  // teh marbuta: Arabic
  for (const char* id : {"ar1", "ar2"}) write(fs::path("wavs") / (std::string(id) + ".wav"), "");
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.items[0].language, "");
  EXPECT_TRUE(listing.notes.empty());
}

// ------------------------------------------------------------------ the listing as bytes

// Every field of two listings, item by item.
void expect_same_listing(const CorpusListing& decoded, const CorpusListing& read) {
  EXPECT_EQ(decoded.root, read.root);
  EXPECT_EQ(decoded.listing_file, read.listing_file);
  EXPECT_EQ(decoded.format, read.format);
  EXPECT_EQ(decoded.recognised, read.recognised);
  EXPECT_EQ(decoded.notes, read.notes);
  ASSERT_EQ(decoded.items.size(), read.items.size());
  for (size_t i = 0; i < read.items.size(); ++i) {
    const CorpusItem& a = decoded.items[i];
    const CorpusItem& b = read.items[i];
    SCOPED_TRACE("item " + std::to_string(i) + " (" + b.source + ")");
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.audio, b.audio);
    EXPECT_EQ(a.audio.string(), b.audio.string());
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.speaker, b.speaker);
    EXPECT_EQ(a.language, b.language);
    EXPECT_EQ(a.reject, b.reject);
    EXPECT_EQ(a.reject_detail, b.reject_detail);
    EXPECT_EQ(a.metadata, b.metadata);
  }
}

// The listings of every layout the tests above make: each comes back from its encoding field by
// field (what the ranks that do not read a corpus prep on, runtime/prep/listing_share.h), and a
// cut encoding is an error, never a shorter listing.
TEST_F(CorpusTest, EveryLayoutsListingComesBackFromItsEncoding) {
  std::vector<std::pair<std::string, CorpusListing>> listings;
  write_ljspeech_with_every_problem(root_ / "ljspeech-problems");
  listings.emplace_back("ljspeech with every problem", read_corpus(root_ / "ljspeech-problems", CorpusOptions{}));
  write_jsonl_with_every_problem(root_ / "jsonl");
  CorpusOptions with_speaker;
  with_speaker.speaker = "default-speaker";
  listings.emplace_back("jsonl", read_corpus(root_ / "jsonl" / "list.jsonl", with_speaker));
  write_persian_rows_one_without_persian_letters(root_ / "persian");
  listings.emplace_back("persian", read_corpus(root_ / "persian", CorpusOptions{}));
  test::make_ljspeech_replica(root_ / "ljspeech");
  listings.emplace_back("ljspeech replica", read_corpus(root_ / "ljspeech", CorpusOptions{}));
  test::make_libritts_replica(root_ / "libritts");
  listings.emplace_back("libritts", read_corpus(root_ / "libritts", CorpusOptions{}));
  CorpusOptions raw;
  raw.text_column = "raw";
  raw.format = "libritts";
  listings.emplace_back("libritts raw", read_corpus(root_ / "libritts" / "train-clean-100", raw));
  test::make_vctk_replica(root_ / "vctk");
  listings.emplace_back("vctk", read_corpus(root_ / "vctk", CorpusOptions{}));
  CorpusOptions mic2;
  mic2.vctk_mic = "mic2";
  listings.emplace_back("vctk mic2", read_corpus(root_ / "vctk", mic2));
  test::make_commonvoice_replica(root_ / "cv" / "fa");
  listings.emplace_back("commonvoice", read_corpus(root_ / "cv" / "fa", CorpusOptions{}));
  listings.emplace_back("empty", CorpusListing{});

  std::set<std::string> kinds_of_field;  // that the layouts above exercise what they should
  for (const auto& [name, listing] : listings) {
    SCOPED_TRACE(name);
    const std::string bytes = encode_listing(listing);
    const CorpusListing decoded = decode_listing(bytes);
    expect_same_listing(decoded, listing);
    EXPECT_EQ(encode_listing(decoded), bytes);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      EXPECT_THROW(decode_listing(bytes.substr(0, cut)), Error) << "cut to " << cut << " of " << bytes.size();
    }
    EXPECT_THROW(decode_listing(bytes + "x"), Error);
    if (!listing.notes.empty()) kinds_of_field.insert("notes");
    for (const auto& item : listing.items) {
      if (item.reject) kinds_of_field.insert("reject");
      if (!item.metadata.empty()) kinds_of_field.insert("metadata");
      if (!item.speaker.empty()) kinds_of_field.insert("speaker");
      if (!item.language.empty()) kinds_of_field.insert("language");
    }
  }
  EXPECT_EQ(kinds_of_field, (std::set<std::string>{"language", "metadata", "notes", "reject", "speaker"}));
}

TEST(TextExcerpt, CutsAtACharacterBoundary) {
  EXPECT_EQ(text_excerpt("short", 200), "short");
  EXPECT_EQ(text_excerpt("abcdef", 4), "abcd...");
  EXPECT_EQ(text_excerpt("سلام", 3), "س...");  // 2-byte letters: not half of the second one
}

}  // namespace
}  // namespace sluice::dataset
