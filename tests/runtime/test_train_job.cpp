// `sluice train` end to end: the real binary, real mpirun ranks, the real libtorch model on the
// sample corpus's cache.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

CommandResult run(const std::string& command) { return test::run_command(command); }
fs::path scratch(const std::string& name) { return test::scratch_dir("train-test", name); }
using nlohmann::json;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

class TrainJob : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = scratch("cache");
    const auto result = run(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                            " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // Settings small enough for CI's 2 cores: tiny model, 2 buckets, short warm-up.
  static std::string train(int ranks, const fs::path& run_dir, int steps, const std::string& extra = "") {
    const std::string launcher =
        ranks > 1 ? std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " " : "";
    return launcher + SLUICE_BINARY + " train --cache " + cache_.string() + " --run-dir " + run_dir.string() +
           " --steps " + std::to_string(steps) +
           " --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10 "
           "--set train.log_every=5 " + extra;
  }

  static fs::path cache_;
};
fs::path TrainJob::cache_;

std::vector<double> losses(const fs::path& run_dir, int rank) {
  return read_json(run_dir / "ranks" / ("rank-" + std::to_string(rank) + ".json"))["losses"].get<std::vector<double>>();
}

double mean(const std::vector<double>& values, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += values[i];
  return sum / double(end - begin);
}

TEST_F(TrainJob, OneProcessFeedsItselfAndTheLossFalls) {
  const fs::path run_dir = scratch("one-process");
  const auto result = run(train(1, run_dir, 40));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("data+model  itself (in-process)"), std::string::npos) << result.output;
  const auto trained = losses(run_dir, 0);
  ASSERT_EQ(trained.size(), 40u);
  EXPECT_LT(mean(trained, 35, 40), 0.8 * mean(trained, 0, 5));
  const json stats = read_json(run_dir / "ranks" / "rank-0.json");
  EXPECT_EQ(stats["feed"]["batches"], 40);
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "latest.json"));
  EXPECT_EQ(read_json(run_dir / "checkpoints" / "latest.json")["global_step"], 40);
  EXPECT_TRUE(fs::exists(run_dir / "sluice-train.yaml"));
}

TEST_F(TrainJob, OneDataRankFeedsTwoModelRanksOverMpi) {
  const fs::path run_dir = scratch("three-ranks");
  const auto result = run(train(3, run_dir, 12));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("feeds 1,2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("transport mpi"), std::string::npos) << result.output;
  const json data = read_json(run_dir / "ranks" / "rank-0.json");
  EXPECT_EQ(data["role"], "data");
  EXPECT_EQ(data["batches"], 24);  // 12 steps x 2 model ranks
  for (int rank : {1, 2}) {
    const json model = read_json(run_dir / "ranks" / ("rank-" + std::to_string(rank) + ".json"));
    EXPECT_EQ(model["role"], "model");
    EXPECT_EQ(model["steps"], 12);
    EXPECT_EQ(model["samples"], 48);
  }
  // Data parallelism: both ranks hold the same weights, so the same validation loss.
  EXPECT_EQ(read_json(run_dir / "ranks" / "rank-1.json")["validation"],
            read_json(run_dir / "ranks" / "rank-2.json")["validation"]);
}

TEST_F(TrainJob, ResumeContinuesExactlyWhereTheUninterruptedRunWent) {
  const fs::path straight = scratch("straight"), resumed = scratch("resumed");
  ASSERT_EQ(run(train(3, straight, 16, "--set train.checkpoint_every=8")).exit_code, 0);
  const auto first = run(train(3, resumed, 8));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run(train(3, resumed, 16, "--resume"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto reference = losses(straight, 1);
  const auto continued = losses(resumed, 1);
  ASSERT_EQ(reference.size(), 16u);
  ASSERT_EQ(continued.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(continued[i], reference[8 + i]) << "step " << 8 + i;
}

TEST_F(TrainJob, ReplayFromMemoryTrainsTheSameShapesWithoutAFeed) {
  const fs::path fed = scratch("fed"), replayed = scratch("replayed");
  ASSERT_EQ(run(train(3, fed, 10)).exit_code, 0);
  const auto result = run(train(3, replayed, 10, "--set train.replay_from_memory=true"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(read_json(replayed / "ranks" / "rank-0.json")["batches"], 0);  // the data rank idles
  const json model = read_json(replayed / "ranks" / "rank-1.json");
  EXPECT_TRUE(model["replay_from_memory"].get<bool>());
  EXPECT_EQ(model["steps"], 10);
  EXPECT_EQ(model["steady_steps"], 8);
  EXPECT_GT(model["steady_padded_frames_per_second"].get<double>(), 0.0);
  // Same bucket sequence, so the same padded frames per step on average as the fed run.
  const json reference = read_json(fed / "ranks" / "rank-1.json");
  EXPECT_NEAR(model["steady_padded_frames_per_second"].get<double>() * model["steady_seconds"].get<double>(),
              reference["steady_padded_frames_per_second"].get<double>() * reference["steady_seconds"].get<double>(),
              1.0);
}

TEST_F(TrainJob, ResumeWithoutCheckpointOrWithAnotherPlanIsRefused) {
  const fs::path run_dir = scratch("refused");
  auto result = run(train(1, run_dir, 4, "--resume"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("no checkpoint"), std::string::npos) << result.output;
  ASSERT_EQ(run(train(1, run_dir, 4)).exit_code, 0);
  result = run(train(1, run_dir, 8, "--resume --set train.batch_size=3"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("batch plan differs"), std::string::npos) << result.output;
}

// A data rank that stops answering (SIGSTOP: alive but silent) is named by the model ranks, and
// the job ends non-zero within twice runtime.timeout_s.
TEST_F(TrainJob, SilentDataRankIsNamedAndTheJobEnds) {
  const fs::path run_dir = scratch("silent");
  const double timeout_s = 4;
  const std::string log = (run_dir / "output.txt").string();
  const pid_t child = ::fork();
  if (child == 0) {
    ::setsid();
    const std::string command = train(3, run_dir, 100000, "--set runtime.timeout_s=4") + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until training runs, then find rank 0 (the data rank) among the group's processes.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  pid_t data_rank = -1;
  while (data_rank < 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::ifstream out(log);
    const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    if (text.find("step 5/") == std::string::npos) continue;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream environ(entry.path() / "environ");
      const std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
      std::ifstream cmdline(entry.path() / "cmdline");
      const std::string cmd((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
      if (cmd.find(run_dir.string()) != std::string::npos && cmd.rfind(SLUICE_BINARY, 0) == 0 &&
          env.find(std::string("OMPI_COMM_WORLD_RANK=0") + '\0') != std::string::npos) {
        data_rank = std::stoi(name);
      }
    }
  }
  ASSERT_GT(data_rank, 0) << "the run did not start training";
  const auto stopped = std::chrono::steady_clock::now();
  ::kill(data_rank, SIGSTOP);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0 &&
         std::chrono::steady_clock::now() - stopped < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  ::kill(-child, SIGKILL);  // whatever is left, including the stopped rank
  ::kill(data_rank, SIGKILL);
  ::waitpid(child, &status, 0);

  std::ifstream out(log);
  const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_LT(elapsed, 2 * timeout_s) << text;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << text;
  EXPECT_NE(text.find("from its data rank 0 (host "), std::string::npos) << text;
  EXPECT_NE(text.find("waiting for global step"), std::string::npos) << text;
}

}  // namespace
}  // namespace sluice
