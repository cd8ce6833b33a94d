// `sluice train` on a mixture of caches (train.mixture): the real binary, real mpirun ranks and the
// real libtorch model on two caches prepared from the sample corpus (all of it, and its clips of at
// most 4.5 s). Short runs: the whole suite stays inside CI's budget on 2 cores.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cache/cache_reader.h"
#include "tests/support/command.h"
#include "tests/support/report_json.h"
#include "tests/support/text_file.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CommandResult;

CommandResult run(const std::string& command) { return test::run_command(command); }
fs::path scratch(const std::string& name) { return test::scratch_dir("mixture-test", name); }

using test::read_json;
using test::read_text;

class Mixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    all_ = scratch("all");
    short_ = scratch("short");
    for (const auto& [dir, extra] : {std::pair{all_, std::string()}, std::pair{short_, std::string(" --set prep.max_seconds=4.5 --set prep.max_reject_fraction=0.9")}}) {
      const auto result = run(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " +
                              dir.string() + " --set cache.shard_size=32" + extra);
      ASSERT_EQ(result.exit_code, 0) << result.output;
    }
  }

  static std::string train(int ranks, const fs::path& run_dir, int steps, const std::string& mixture,
                           const std::string& extra = "") {
    const std::string launcher =
        ranks > 1 ? std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " " : "";
    return launcher + SLUICE_BINARY + " train --run-dir " + run_dir.string() + " --steps " + std::to_string(steps) +
           " --set 'train.mixture=" + mixture + "' --set train.n_buckets=2 --set train.batch_size=4 "
           "--set optim.warmup_steps=10 --set train.log_every=5 " + extra;
  }

  static fs::path all_, short_;
};
fs::path Mixture::all_, Mixture::short_;

TEST_F(Mixture, ThreeRanksTrainOnTwoCachesAndTheReportShowsEachCorpusShare) {
  const fs::path run_dir = scratch("three-ranks");
  const std::string mixture = all_.string() + ":1, " + short_.string() + ":0.5";
  const auto result = run(train(3, run_dir, 6, mixture, "--set train.validation_fraction=0.2"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (int rank : {1, 2}) {
    const json model = read_json(run_dir / "ranks" / ("rank-" + std::to_string(rank) + ".json"));
    EXPECT_EQ(model["steps"], 6);
    EXPECT_EQ(model["samples"], 24);
  }
  // The validation loss per corpus: the same on both model ranks, one finite mean per cache.
  const json validation = read_json(run_dir / "ranks" / "rank-1.json")["validation"];
  ASSERT_FALSE(validation.empty());
  const json last = validation.back();
  ASSERT_EQ(last["corpora"].size(), 2u) << validation.dump(2);
  for (const json& loss : last["corpora"]) EXPECT_TRUE(loss.is_number()) << validation.dump(2);
  EXPECT_EQ(read_json(run_dir / "ranks" / "rank-2.json")["validation"], validation);
  // ... and per language, over both caches (the sample corpus speaks English and Persian).
  ASSERT_TRUE(last.contains("languages")) << validation.dump(2);
  for (const char* code : {"en", "fa"}) EXPECT_TRUE(last["languages"][code].is_number()) << validation.dump(2);
  // ... and in the report: report.json "validation" and report.md's table, a column per cache.
  EXPECT_EQ(read_json(run_dir / "report.json")["validation"]["passes"], validation);
  // padding.json: each corpus's share of epoch 0's samples, padding and input time.
  const json corpora = read_json(run_dir / "padding.json")["corpora"];
  ASSERT_EQ(corpora.size(), 2u) << corpora.dump(2);
  double samples = 0, padding = 0, frames = 0;
  for (const json& c : corpora) {
    EXPECT_GT(c["samples"].get<int64_t>(), 0) << c.dump();
    samples += c["sample_share"].get<double>();
    padding += c["padding_share"].get<double>();
    frames += c["frame_share"].get<double>();
  }
  EXPECT_NEAR(samples, 1.0, 1e-9);
  EXPECT_NEAR(padding, 1.0, 1e-9);
  EXPECT_NEAR(frames, 1.0, 1e-9);
  EXPECT_EQ(corpora[0]["weight"], 1.0);
  EXPECT_EQ(corpora[1]["weight"], 0.5);
  // The short cache has fewer, shorter clips and half the weight: a smaller share of the input.
  EXPECT_LT(corpora[1]["frame_share"].get<double>(), corpora[0]["frame_share"].get<double>());
  EXPECT_EQ(read_json(run_dir / "report.json")["padding"]["corpora"], corpora);
  const std::string report = read_text(run_dir / "report.md");
  EXPECT_NE(report.find("Corpora (train.mixture"), std::string::npos) << report;
  EXPECT_NE(report.find("share of padding"), std::string::npos) << report;
  EXPECT_NE(report.find("| global step | loss | corpus 0 "), std::string::npos) << report;
  EXPECT_NE(report.find("| language en | language fa |"), std::string::npos) << report;
  // cache.json records the mixture: its caches, fingerprints and weights.
  const json record = read_json(run_dir / "cache.json");
  ASSERT_EQ(record["mixture"].size(), 2u) << record.dump(2);
  EXPECT_EQ(record["mixture"][1]["weight"], 0.5);
}

TEST_F(Mixture, CachesWithOtherFeaturesAreRefusedWithExitTwoNamingTheSetting) {
  const fs::path other = scratch("forty-mels");
  auto result = run(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " + other.string() +
                    " --set cache.shard_size=32 --set prep.max_seconds=4 --set prep.max_reject_fraction=0.9 --set features.n_mels=40");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  result = run(train(1, scratch("refused"), 2, all_.string() + ":1, " + other.string() + ":1"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("features.n_mels: 80 in " + all_.string() + ", 40 in " + other.string()),
            std::string::npos)
      << result.output;
}

TEST_F(Mixture, ResumeContinuesExactlyAndAnotherMixtureIsRefused) {
  const std::string mixture = all_.string() + ":1, " + short_.string() + ":0.5";
  const fs::path straight = scratch("straight"), resumed = scratch("resumed");
  ASSERT_EQ(run(train(1, straight, 4, mixture, "--set train.checkpoint_every=2")).exit_code, 0);
  ASSERT_EQ(run(train(1, resumed, 2, mixture)).exit_code, 0);
  // Other weights name other samples from the checkpoint on: refused, the run left as it was.
  auto result = run(train(1, resumed, 4, all_.string() + ":1, " + short_.string() + ":1", "--resume"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("Resume with the same train.mixture"), std::string::npos) << result.output;
  result = run(train(1, resumed, 4, mixture, "--resume"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto reference = read_json(straight / "ranks" / "rank-0.json")["losses"].get<std::vector<double>>();
  const auto continued = read_json(resumed / "ranks" / "rank-0.json")["losses"].get<std::vector<double>>();
  ASSERT_EQ(reference.size(), 4u);
  ASSERT_EQ(continued.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(continued[i], reference[2 + i]) << "step " << 2 + i;
}

// An elastic resume of a mixture: epoch 0 of "all:0.25, short:1.5" (a quarter of one cache, and the
// other once plus half of it again: a sample owed twice in the epoch) begun on 3 model ranks, stopped
// after 3 steps and finished on 2. debug.log_samples records every batch; each sample is trained
// at most as often as the epoch owes it (once for the first cache, twice for the second), and the
// trained copies plus those the rest defers to epoch 1 are the epoch's owed samples, printed by the
// plan summary.
TEST_F(Mixture, AnElasticResumeOnFewerModelRanksTrainsEachOwedCopyOnce) {
  const fs::path run_dir = scratch("elastic");
  const std::string mixture = all_.string() + ":0.25, " + short_.string() + ":1.5";
  const std::string extra =
      "--set train.epochs=1 --set train.n_buckets=1 --set train.validation_every=0 --set train.checkpoint_every=0 "
      "--set debug.log_samples=true";
  const auto first = run(train(4, run_dir, 3, mixture, extra));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(first.output, match, std::regex(R"((\d+) samples \(0 carried in from the epoch before\))")))
      << first.output;
  const int64_t owed = std::stoll(match[1]);
  const auto second = run(train(3, run_dir, 0, mixture, extra + " --resume"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  ASSERT_TRUE(std::regex_search(second.output, match,
                                std::regex(R"(goes on with the (\d+) samples it has not trained \((\d+) were; 0 carried )"
                                           R"(in\), in (\d+) steps \((\d+) deferred to the next epoch\))")))
      << second.output;
  const int64_t untrained = std::stoll(match[1]), trained_before = std::stoll(match[2]), left_over = std::stoll(match[4]);
  EXPECT_EQ(untrained + trained_before, owed);
  std::map<int64_t, int> times;
  int64_t trained = 0, in_first_run = 0;
  for (const auto& file : fs::directory_iterator(run_dir / "samples")) {
    std::ifstream in(file.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      int64_t global = 0, epoch = 0, step = 0;
      std::string indices;
      fields >> global >> epoch >> step >> indices;
      std::istringstream list(indices);
      for (std::string index; std::getline(list, index, ',');) {
        ++times[std::stoll(index)];
        ++trained;
        in_first_run += global < 3 ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(in_first_run, trained_before);  // 3 steps of 3 model ranks (one may be the tail step)
  EXPECT_EQ(trained + left_over, owed);
  EXPECT_LT(left_over, 2);
  const int64_t second_cache = read_json(all_ / "manifest.json")["totals"]["samples"].get<int64_t>();
  int64_t twice = 0;
  for (const auto& [index, n] : times) {
    EXPECT_LE(n, index < second_cache ? 1 : 2) << "sample " << index;
    twice += n == 2 ? 1 : 0;
  }
  EXPECT_GT(twice, 0) << "the second cache's epoch owes some samples twice";
}

// The caches' languages and speakers as one table each: a language is its code in every cache, a
// speaker its cache's (the second cache's follow the first's).
TEST_F(Mixture, LanguagesAndSpeakersAreUnifiedOverTheCaches) {
  const cache::CacheReader mixture = cache::CacheReader::open_mixture({short_, all_});
  const std::vector<fs::path> dirs = {short_, all_};
  std::vector<std::string> expected_languages;
  size_t speakers_before = 0;
  for (size_t c = 0; c < dirs.size(); ++c) {
    const cache::CacheReader part = cache::CacheReader::open(dirs[c]);
    expected_languages.insert(expected_languages.end(), part.languages().begin(), part.languages().end());
    for (int64_t i = 0; i < part.size(); ++i) {
      const cache::IndexEntry& mine = part.entry(i);
      const cache::IndexEntry& unified = mixture.entry(mixture.first_index(c) + i);
      ASSERT_EQ(mixture.languages().at(unified.language), part.languages().at(mine.language)) << "cache " << c << " " << i;
      ASSERT_EQ(unified.speaker, speakers_before + mine.speaker) << "cache " << c << " " << i;
      ASSERT_EQ(mixture.speakers().at(unified.speaker), part.speakers().at(mine.speaker));
      ASSERT_EQ(mixture.speaker_corpus(unified.speaker), c);
    }
    speakers_before += part.speakers().size();
  }
  std::sort(expected_languages.begin(), expected_languages.end());
  expected_languages.erase(std::unique(expected_languages.begin(), expected_languages.end()), expected_languages.end());
  EXPECT_EQ(mixture.languages(), expected_languages);
  EXPECT_EQ(mixture.languages(), (std::vector<std::string>{"en", "fa"}));
  EXPECT_EQ(mixture.speakers().size(), speakers_before);
}

// One cache tempered over its languages (train.mixture_temperature_over: language): the smaller
// language gets (n_fa / n_en)^a of the larger one's samples per epoch, the epoch's total unchanged;
// a resume over another unit is refused.
TEST_F(Mixture, OneCacheTemperedOverItsLanguagesUpsamplesTheSmallerOne) {
  const fs::path run_dir = scratch("languages");
  const std::string command = std::string(SLUICE_BINARY) + " train --cache " + all_.string() + " --run-dir " +
                              run_dir.string() + " --steps 2 --set train.n_buckets=1 --set train.batch_size=4 " +
                              "--set train.mixture_temperature=0.25 ";
  const auto result = run(command + "--set train.mixture_temperature_over=language --set train.checkpoint_every=2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(result.output, match,
                                std::regex(R"(train.mixture_temperature 0.25 over each language, samples per epoch \(of the )"
                                           R"(split's\): (\w+) (\d+) \((\d+)\); (\w+) (\d+) \((\d+)\))")))
      << result.output;
  const double big = std::stod(match[2]), big_n = std::stod(match[3]);
  const double small = std::stod(match[5]), small_n = std::stod(match[6]);
  ASSERT_LT(small_n, big_n) << "the sample corpus has 70 English and 50 Persian clips: " << match[0];
  EXPECT_NEAR(small / big, std::pow(small_n / big_n, 0.25), 0.02) << match[0];
  EXPECT_NEAR(small + big, small_n + big_n, 1.0) << match[0];
  EXPECT_GT(small, small_n) << "upsampled";
  // The same shares in padding.json and report.md.
  const json units = read_json(run_dir / "padding.json")["mixture_units"];
  EXPECT_EQ(units["over"], "language") << units.dump(2);
  ASSERT_EQ(units["units"].size(), 2u) << units.dump(2);
  EXPECT_EQ(units["units"][1]["name"], match[4].str()) << units.dump(2);
  EXPECT_NEAR(units["units"][1]["per_epoch"].get<double>(), small, 0.5) << units.dump(2);
  EXPECT_EQ(units["units"][1]["samples"].get<double>(), small_n) << units.dump(2);
  EXPECT_NE(read_text(run_dir / "report.md").find("Languages (train.mixture_temperature 0.25 over each language"),
            std::string::npos);
  const auto other = run(command + "--set train.mixture_temperature_over=speaker --resume");
  EXPECT_EQ(other.exit_code, 2) << other.output;
}

}  // namespace
}  // namespace sluice
