#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "dataset/corpus.h"

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

  fs::path root_;
};

TEST_F(CorpusTest, LjspeechRowsInOrderWithEveryListingProblem) {
  write("metadata.csv",
        "a1|Raw one|Normalized one\n"
        "a2|Raw two|\n"
        "\n"
        "broken row without bars\n"
        "a1|again|again\n"
        "../../etc/passwd|escape|escape\n"
        "a3|   |   \n"
        "a4|x|y|z\n"
        "a5|Windows line|Windows line\r\n");
  const CorpusListing listing = read_corpus(root_, CorpusOptions{});
  EXPECT_EQ(listing.format, "ljspeech");
  ASSERT_EQ(listing.items.size(), 8u);  // the blank line is not a row

  EXPECT_EQ(listing.items[0].id, "a1");
  EXPECT_EQ(listing.items[0].text, "Normalized one");
  EXPECT_EQ(listing.items[0].audio, fs::weakly_canonical(root_) / "wavs" / "a1.wav");
  EXPECT_EQ(listing.items[0].source, "metadata.csv:1");
  EXPECT_FALSE(listing.items[0].reject.has_value());
  EXPECT_EQ(listing.items[1].text, "Raw two");  // empty normalized column falls back to raw

  EXPECT_EQ(listing.items[2].source, "metadata.csv:4");
  EXPECT_EQ(listing.items[2].reject, RejectReason::malformed_row);
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
  write("list.jsonl",
        R"({"id":"x1","audio":"wavs/x1.flac","text":"hello","speaker":"s1","language":"en"})" "\n"
        R"({"id":"x2","audio":"wavs/x2.wav","text":"سلام"})" "\n"
        "not json\n"
        R"({"id":"x3","text":"no audio"})" "\n"
        R"({"id":"x4","audio":"../outside.wav","text":"t"})" "\n"
        R"({"id":"x5","audio":"/etc/hostname","text":"t"})" "\n"
        R"({"id":"x1","audio":"wavs/x1b.wav","text":"t"})" "\n"
        R"({"id":"x6","audio":"wavs/x6.wav","text":"t","speaker":7})" "\n");
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

TEST_F(CorpusTest, MissingOrUnrecognisedCorpusIsAClearError) {
  try {
    read_corpus(root_ / "nope", CorpusOptions{});
    FAIL() << "expected DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("does not exist"), std::string::npos);
  }
  EXPECT_THROW(read_corpus(root_, CorpusOptions{}), DataError);  // no metadata.csv
}

}  // namespace
}  // namespace sluice::dataset
