// `sluice doctor --json` and `sluice bench sweep` end to end: the real binary on a small cache
// prepared from the sample corpus.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CommandResult;

class Tuning : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cache_ = test::scratch_dir("tuning-test", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // Runs doctor with --json; the JSON is the whole of stdout (logs go to stderr).
  static json doctor(const std::string& options, int* exit_code) {
    const fs::path out = test::scratch_dir("tuning-test", "doctor-out") / "doctor.json";
    const auto result =
        test::run_command(std::string(SLUICE_BINARY) + " doctor --json " + options + " >" + out.string());
    *exit_code = result.exit_code;
    std::ifstream in(out);
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  static bool has_problem(const json& report, const std::string& severity, const std::string& area,
                          const std::string& text) {
    for (const auto& p : report["problems"]) {
      if (p["severity"] == severity && p["area"] == area &&
          (p["what"].get<std::string>().find(text) != std::string::npos ||
           p["fix"].get<std::string>().find(text) != std::string::npos)) {
        return true;
      }
    }
    return false;
  }

  static fs::path cache_;
};
fs::path Tuning::cache_;

TEST_F(Tuning, DoctorOnAGoodCacheReportsFactsAndExitsZero) {
  int code = -1;
  const json report = doctor("--cache " + cache_.string() + " --verify", &code);
  ASSERT_TRUE(report.is_object()) << "doctor printed no JSON";
  EXPECT_EQ(code, 0) << report.dump(2);
  EXPECT_EQ(report["blocking"], false);
  EXPECT_EQ(report["gpu"]["visible"], "none visible");  // no GPU on CI; not a problem on a CPU run
  EXPECT_EQ(report["mpi"]["launcher"], "singleton");
  EXPECT_EQ(report["mpi"]["world_size"], 1);
  EXPECT_FALSE(report["mpi"]["library"].get<std::string>().empty());
  EXPECT_FALSE(report["hdf5"]["version"].get<std::string>().empty());
  EXPECT_EQ(report["torch"]["device"], "cpu");
  EXPECT_EQ(report["config"]["valid"], true);
  EXPECT_EQ(report["config"]["transport"], "inproc");
  EXPECT_EQ(report["cache"]["samples"], 120);
  EXPECT_EQ(report["cache"]["shards"], 4);
  EXPECT_EQ(report["cache"]["verified"], true);
  EXPECT_TRUE(report["cache"]["verify_faults"].empty());
  EXPECT_EQ(report["cache"]["sequential_read"]["files"], 4);
  EXPECT_GT(report["cache"]["sequential_read"]["bytes"].get<int64_t>(), 0);
  EXPECT_GT(report["cache"]["sequential_read"]["mb_per_s"].get<double>(), 0.0);
}

TEST_F(Tuning, DoctorNamesTheNcclSharedGpuPlanAndExitsOne) {
  int code = -1;
  const json report = doctor("--cache " + cache_.string() +
                                 " --ranks 2 --gpus-per-node 1 --set model.device=cuda --set roles.transport=nccl",
                             &code);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(code, 1);
  EXPECT_EQ(report["blocking"], true);
  EXPECT_EQ(report["config"]["valid"], false);
  EXPECT_EQ(report["config"]["planned_ranks"], 2);
  EXPECT_TRUE(has_problem(report, "blocking", "config", "use roles.transport: cuda_ipc, or one rank per GPU"))
      << report["problems"].dump(2);
  EXPECT_TRUE(has_problem(report, "blocking", "gpu", "no GPU is visible")) << report["problems"].dump(2);
}

// A features setting other than the cache's: train refuses it (exit 2), so doctor, which checks
// the config with train's own errors, must block on it and name the setting and both values.
TEST_F(Tuning, DoctorBlocksOnASettingThatDisagreesWithTheCache) {
  int code = -1;
  const json report = doctor("--cache " + cache_.string() + " --set features.n_mels=64", &code);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(code, 1);
  EXPECT_EQ(report["config"]["valid"], false);
  const std::string error = report["config"]["error"];
  EXPECT_NE(error.find("settings disagree with the cache in " + cache_.string()), std::string::npos) << error;
  EXPECT_NE(error.find("features.n_mels: 64 (--set) but the cache was prepared with 80"), std::string::npos) << error;
}

TEST_F(Tuning, DoctorReportsABadConfigFileWithTrainsErrorAndAMissingCache) {
  const fs::path dir = test::scratch_dir("tuning-test", "bad-config");
  std::ofstream(dir / "train.yaml") << "train:\n  batch_sise: 8\n";
  int code = -1;
  const json report = doctor("-c " + (dir / "train.yaml").string() + " --cache " + (dir / "nowhere").string(), &code);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(code, 1);
  EXPECT_EQ(report["config"]["valid"], false);
  const std::string error = report["config"]["error"];
  EXPECT_NE(error.find("train.yaml:2"), std::string::npos) << error;
  EXPECT_NE(error.find("batch_size"), std::string::npos) << error;  // the close match
  EXPECT_TRUE(has_problem(report, "note", "cache", "the config did not load")) << report["problems"].dump(2);
  // The same words as `sluice train` with that file.
  const CommandResult train = test::run_command(std::string(SLUICE_BINARY) + " train -c " +
                                                (dir / "train.yaml").string() + " --cache " + cache_.string());
  EXPECT_EQ(train.exit_code, 2);
  EXPECT_NE(train.output.find(error), std::string::npos) << train.output;

  const json missing = doctor("--cache " + (dir / "nowhere").string(), &code);
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(has_problem(missing, "blocking", "cache", "does not exist")) << missing["problems"].dump(2);
}

// train.mixture: every cache is checked as cache.dir is (before, only the first one was): the
// totals are the mixture's, a missing second cache is named, and --verify reads each.
TEST_F(Tuning, DoctorChecksEveryCacheOfAMixture) {
  const fs::path dir = test::scratch_dir("tuning-test", "mixture");
  const fs::path copy = dir / "copy";
  fs::copy(cache_, copy, fs::copy_options::recursive);
  int code = -1;
  const std::string both = " --set 'train.mixture=" + cache_.string() + ":1, " + copy.string() + ":0.5'";
  const json report = doctor(both + " --verify", &code);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(code, 0) << report.dump(2);
  EXPECT_EQ(report["cache"]["samples"], 240);
  EXPECT_EQ(report["cache"]["shards"], 8);
  EXPECT_EQ(report["cache"]["mixture"].size(), 2u);
  EXPECT_TRUE(report["cache"]["verify_faults"].empty()) << report["cache"].dump(2);

  // A flipped byte in the second cache's shard (same size, so it still opens): --verify names it.
  const fs::path shard = copy / "shard-00001.h5";
  std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(fs::file_size(shard) / 2));
  char byte = 0;
  file.read(&byte, 1);
  file.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
  byte = static_cast<char>(byte ^ 0x5a);
  file.write(&byte, 1);
  file.close();
  const json damaged = doctor(both + " --verify", &code);
  EXPECT_EQ(code, 1) << damaged.dump(2);
  ASSERT_FALSE(damaged["cache"]["verify_faults"].empty()) << damaged["cache"].dump(2);
  EXPECT_NE(damaged["cache"]["verify_faults"][0].get<std::string>().find(copy.string() + "/shard-00001.h5"), std::string::npos)
      << damaged["cache"].dump(2);

  const json missing = doctor(" --set 'train.mixture=" + cache_.string() + ":1, " + (dir / "nowhere").string() + ":1'", &code);
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(has_problem(missing, "blocking", "cache", "cache directory " + (dir / "nowhere").string() + " does not exist"))
      << missing["problems"].dump(2);
}

TEST_F(Tuning, SweepRunsEveryPointAndPrintsTheTable) {
  const fs::path scratch = test::scratch_dir("tuning-test", "sweep");
  const CommandResult result = test::run_command(
      std::string(SLUICE_BINARY) + " bench sweep --cache " + cache_.string() + " --np 1 --steps 5 --repeat 2" +
      " --sweep train.batch_size=1,2 --set train.n_buckets=2 --set optim.warmup_steps=2 --scratch " +
      scratch.string() + " --keep");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("2 point(s) x 2 repeat(s), 5 steps each"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("train.batch_size=1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("train.batch_size=2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("efficiency"), std::string::npos) << result.output;
  // Two replay baselines (one per batch size) and four fed runs, each with its rank file.
  for (const char* run : {"replay-0", "replay-1", "point-0-run-0", "point-0-run-1", "point-1-run-0", "point-1-run-1"}) {
    EXPECT_TRUE(fs::exists(scratch / run / "ranks" / "rank-0.json")) << run;
  }
  // Two repeats are too few to trust a spread: the sweep declines to choose, and says why.
  EXPECT_EQ(result.output.find("recommended ("), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("no recommendation: train.batch_size=1 has 2 successful run(s)"), std::string::npos)
      << result.output;
}

TEST_F(Tuning, MaxBatchRefusesWithoutAGpu) {
  int code = -1;
  if (doctor("--cache " + cache_.string(), &code)["torch"]["cuda_devices"] != 0) GTEST_SKIP() << "a GPU is visible";
  const CommandResult result = test::run_command(std::string(SLUICE_BINARY) + " bench max-batch");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("needs a CUDA device"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace sluice
