// Elastic resume end to end: the real `sluice` binary under the real mpirun, stopped mid-epoch on
// one number of model ranks and resumed with --resume on another. debug.log_samples records what
// every model rank trained (RUN_DIR/samples/rank-N.tsv), so the test counts every sample of the
// epoch across both runs: each trained exactly once, and the trained plus what the rest's plan
// deferred to the next epoch (printed by the resumed run) is the whole training split. And over a
// run of several epochs, stopped, resumed on as many ranks and resumed on another count: every
// sample trained once per epoch, but the last epoch's remainder, deferred past the run's end.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/command.h"
#include "tests/support/printed_count.h"

namespace sluice {
namespace {

using test::printed;

namespace fs = std::filesystem;

class ElasticResume : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = test::scratch_dir("elastic-test", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // One data rank (roles.data_per_node auto) and `model_ranks` model ranks; `steps` 0 trains to the
  // end of epoch 0 (train.epochs = 1). Batches of 2 in one bucket: about 14 steps of 8 samples on
  // 4 model ranks (the sample corpus's ~114 training samples), so a stop after a few is mid-epoch.
  static test::CommandResult train(int model_ranks, const fs::path& run_dir, int steps, const std::string& extra = "",
                                   int epochs = 1) {
    const std::string command = std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " +
                                std::to_string(model_ranks + 1) + " " + SLUICE_BINARY + " train --cache " +
                                cache_.string() + " --run-dir " + run_dir.string() + " --steps " +
                                std::to_string(steps) +
                                " --set train.epochs=" + std::to_string(epochs) +
                                " --set train.n_buckets=1 --set train.batch_size=2"
                                " --set train.validation_every=0 --set train.checkpoint_every=0"
                                " --set debug.log_samples=true --set runtime.timeout_s=60 " + extra;
    return test::run_command(command);
  }

  static fs::path cache_;
};
fs::path ElasticResume::cache_;

struct Trained {
  std::map<int64_t, int> times;  // sample index -> batches it was in
  int64_t batches = 0;
};

// Every line of every rank's sample log of `only_epoch` (-1: of every epoch).
Trained trained_in(const fs::path& run_dir, int64_t only_epoch) {
  Trained trained;
  for (const auto& file : fs::directory_iterator(run_dir / "samples")) {
    std::ifstream in(file.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      int64_t global = 0, epoch = 0, step = 0;
      std::string indices;
      fields >> global >> epoch >> step >> indices;
      if (only_epoch >= 0 && epoch != only_epoch) continue;
      ++trained.batches;
      std::istringstream list(indices);
      for (std::string index; std::getline(list, index, ',');) ++trained.times[std::stoll(index)];
    }
  }
  return trained;
}

// "114 samples (0 carried in from the epoch before), 15 global steps in epoch 0 for 4 model
// rank(s), ..." from the plan summary.
int64_t split_size(const std::string& output) {
  std::smatch match;
  const std::regex summary(R"((\d+) samples \(\d+ carried in from the epoch before\), \d+ global steps)");
  EXPECT_TRUE(std::regex_search(output, match, summary)) << output;
  return match.empty() ? -1 : std::stoll(match[1]);
}

// The resumed run's account of the rest of the epoch: samples not yet trained, trained, steps,
// deferred to the next epoch.
struct Rest {
  int64_t untrained = -1, trained = -1, steps = -1, left_over = -1;
};
Rest elastic_line(const std::string& output) {
  std::smatch match;
  Rest rest;
  if (std::regex_search(output, match,
                        std::regex(R"(goes on with the (\d+) samples it has not trained \((\d+) were; \d+ carried )"
                                   R"(in\), in (\d+) steps \((\d+) deferred to the next epoch\))"))) {
    rest = {std::stoll(match[1]), std::stoll(match[2]), std::stoll(match[3]), std::stoll(match[4])};
  }
  return rest;
}

// Runs `before` model ranks for `stop_after` steps, resumes on `after` to the end of the epoch,
// and counts every sample.
void expect_every_sample_once(const fs::path& run_dir, int before, int stop_after, int after) {
  const auto first = ElasticResume::train(before, run_dir, stop_after);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const int64_t split = split_size(first.output);
  const auto second = ElasticResume::train(after, run_dir, 0, "--resume");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const Rest rest = elastic_line(second.output);
  ASSERT_GE(rest.steps, 1) << second.output;
  const Trained trained = trained_in(run_dir, 0);
  // Each model rank logged one batch per step: the first run's steps, then the rest's.
  EXPECT_EQ(trained.batches, int64_t{stop_after} * before + rest.steps * after);
  int64_t twice = 0;
  for (const auto& [index, times] : trained.times) twice += times > 1 ? 1 : 0;
  EXPECT_EQ(twice, 0) << "samples trained more than once in the epoch";
  EXPECT_EQ(rest.trained, int64_t{stop_after} * before * 2);
  EXPECT_EQ(rest.untrained + rest.trained, split);
  EXPECT_EQ(static_cast<int64_t>(trained.times.size()) + rest.left_over, split);
  EXPECT_LT(rest.left_over, after) << "more deferred than the model ranks";
  // The resumed run ends at the end of the epoch, one step after the last it trained.
  EXPECT_NE(second.output.find("step " + std::to_string(stop_after + rest.steps) + "/" +
                               std::to_string(stop_after + rest.steps)),
            std::string::npos)
      << second.output;
}

TEST_F(ElasticResume, FourModelRanksToTwoTrainEverySampleOfTheEpochOnce) {
  expect_every_sample_once(test::scratch_dir("elastic-test", "four-to-two"), 4, 3, 2);
}

TEST_F(ElasticResume, TwoModelRanksToThreeTrainEverySampleOfTheEpochOnce) {
  expect_every_sample_once(test::scratch_dir("elastic-test", "two-to-three"), 2, 10, 3);
}

// Three epochs on 4 model ranks (batches of 2: 8 samples a step, which the ~114 training samples
// do not fill evenly), stopped in epoch 1, resumed on 4 to a later step of it, then on 3 to the end.
TEST_F(ElasticResume, OverThreeEpochsAResumeAndAnElasticResumeEverySampleIsTrainedOncePerEpoch) {
  const fs::path run_dir = test::scratch_dir("elastic-test", "three-epochs");
  constexpr int kEpochs = 3;
  // ~14 steps per epoch: step 17 is in epoch 1, 24 later in it.
  const auto first = train(4, run_dir, 17, "", kEpochs);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const int64_t split = split_size(first.output);
  EXPECT_LT(printed(first.output, R"(training \d+ global steps \((\d+) per epoch\))"), 17) << first.output;
  // The remainder this test is about: epoch 0 defers some samples to epoch 1.
  EXPECT_GT(printed(first.output, R"((\d+) deferred to the next epoch)"), 0) << first.output;
  const auto second = train(4, run_dir, 24, "--resume", kEpochs);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto third = train(3, run_dir, 0, "--resume", kEpochs);
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("elastic resume"), std::string::npos) << third.output;
  const int64_t deferred_past_end = printed(third.output, R"((\d+) samples deferred past the run's end)");
  EXPECT_LT(deferred_past_end, 3) << "more deferred than the model ranks";

  const Trained trained = trained_in(run_dir, -1);
  ASSERT_EQ(static_cast<int64_t>(trained.times.size()), split) << "a sample was never trained";
  int64_t short_one = 0, total = 0;
  for (const auto& [index, times] : trained.times) {
    EXPECT_TRUE(times == kEpochs || times == kEpochs - 1) << "sample " << index << " trained " << times << " times";
    short_one += times == kEpochs - 1 ? 1 : 0;
    total += times;
  }
  EXPECT_EQ(short_one, deferred_past_end);
  EXPECT_EQ(total, kEpochs * split - deferred_past_end);
}

TEST_F(ElasticResume, AnotherPlanSettingIsStillRefused) {
  const fs::path run_dir = test::scratch_dir("elastic-test", "refused");
  ASSERT_EQ(train(2, run_dir, 2).exit_code, 0);
  const auto result = train(3, run_dir, 0, "--resume --set train.batch_size=3");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("in more than the number of model ranks"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace sluice
