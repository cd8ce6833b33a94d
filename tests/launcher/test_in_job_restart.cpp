// In-job restart end to end (supervisor/supervisor.h): the real `sluice supervise` running the real
// `sluice train` under the real mpirun, and faults made from outside: a model rank killed with
// SIGKILL, or stopped with SIGSTOP for longer than runtime.timeout_s, once the run trains. The
// supervisor must restart the job from its last checkpoint by itself; the run then completes,
// debug.log_samples shows every sample of every epoch trained exactly once (the batches a failed
// round trained past its last checkpoint were lost with it and trained again), and, on the same
// number of ranks, the final losses equal an uninterrupted run's bit for bit (CPU).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/printed_count.h"

namespace sluice {
namespace {

using test::printed;

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int ranks = 4;        // 1 data rank (roles.data_per_node auto) + 3 model ranks
constexpr int model_ranks = 3;
constexpr int batch_size = 4;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

class InJobRestart : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = test::scratch_dir("restart-test", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // `train` and its options, without --run-dir: two epochs of batches of 4 in one bucket (about 9
  // global steps an epoch on 3 model ranks), a checkpoint every 2 steps, a loss line every step.
  static std::string train_args(double timeout_s) {
    return "train --cache " + cache_.string() +
           " --set train.epochs=2 --set train.n_buckets=1 --set train.batch_size=" + std::to_string(batch_size) +
           " --set train.validation_every=0 --set train.checkpoint_every=2 --set train.log_every=1"
           " --set debug.log_samples=true --set runtime.timeout_s=" + std::to_string(timeout_s);
  }

  static std::string supervised(const fs::path& run_dir, double timeout_s, const std::string& options) {
    return std::string(SLUICE_BINARY) + " supervise --launcher mpirun --launcher-arg=--bind-to --launcher-arg=none "
           "--launcher-arg=--oversubscribe --run-dir " + run_dir.string() + " " + options + " -- " + train_args(timeout_s);
  }

  static fs::path cache_;
};
fs::path InJobRestart::cache_;

// A supervised job started in its own process group, its output in RUN_DIR/../output.txt.
struct SupervisedJob {
  pid_t pid = -1;
  fs::path log;
  std::vector<pid_t> hit;  // the processes the fault was sent to

  SupervisedJob(const std::string& command, const fs::path& output) : log(output) {
    pid = ::fork();
    if (pid == 0) {
      ::setsid();
      const std::string redirected = command + " > " + log.string() + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", redirected.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~SupervisedJob() {
    for (pid_t target : hit) ::kill(target, SIGKILL);
    if (pid > 0) ::kill(-pid, SIGKILL);
  }

  // Waits until the output shows `words`, then sends `signal` from outside to the process of MPI
  // rank `rank` of this run (its command line names `run_dir`, its environment its rank).
  bool fault_when(const std::string& words, const fs::path& run_dir, int rank, int signal) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(3);
    while (std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (slurp(log).find(words) == std::string::npos) continue;
      for (const auto& entry : fs::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string cmd = slurp(entry.path() / "cmdline");
        if (cmd.find(run_dir.string()) == std::string::npos || cmd.rfind(SLUICE_BINARY, 0) != 0) continue;
        if (slurp(entry.path() / "environ").find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') ==
            std::string::npos) {
          continue;
        }
        hit.push_back(std::stoi(name));
        ::kill(hit.back(), signal);
        return true;
      }
    }
    return false;
  }

  // The supervisor's exit code once it ends (by itself: the test waits up to 5 minutes).
  int wait() {
    int status = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// What the run trained in the end, from RUN_DIR/samples/rank-N.tsv: a restart goes back to its
// checkpoint, so in a rank's file a global step at or below one already seen starts a new round,
// and the lines of the old round from that step on were lost with it. Same rank count only.
struct Trained {
  std::map<int64_t, std::map<int64_t, int>> times;  // epoch -> sample index -> times trained
  std::map<int64_t, std::set<int64_t>> steps;       // epoch -> global steps
  int64_t superseded = 0;                           // lines of failed rounds trained again
};

Trained trained(const fs::path& run_dir) {
  Trained t;
  for (const auto& file : fs::directory_iterator(run_dir / "samples")) {
    std::vector<std::string> kept;
    std::vector<int64_t> kept_steps;
    std::ifstream in(file.path());
    for (std::string line; std::getline(in, line);) {
      const int64_t global = std::stoll(line);
      while (!kept_steps.empty() && kept_steps.back() >= global) {
        kept_steps.pop_back();
        kept.pop_back();
        ++t.superseded;
      }
      kept.push_back(line);
      kept_steps.push_back(global);
    }
    for (const std::string& line : kept) {
      std::istringstream fields(line);
      int64_t global = 0, epoch = 0, step = 0;
      std::string indices;
      fields >> global >> epoch >> step >> indices;
      t.steps[epoch].insert(global);
      std::istringstream list(indices);
      for (std::string index; std::getline(list, index, ',');) ++t.times[epoch][std::stoll(index)];
    }
  }
  return t;
}

// Every sample trained once per epoch over the run's two epochs (the batch plan, batch_plan.h:
// a sample deferred from epoch 0 is trained in epoch 1's plan first, so the audit is over the run,
// not per epoch), but the last epoch's remainder, which the run says it deferred past its end.
void expect_every_sample_once(const fs::path& run_dir, const std::string& output) {
  const Trained t = trained(run_dir);
  const int64_t split = printed(output, R"((\d+) samples \(0 carried in from the epoch before\), \d+ global steps)");
  const int64_t deferred_past_end = printed(output, R"((\d+) samples deferred past the run's end)");
  EXPECT_LT(deferred_past_end, model_ranks) << "more deferred than the model ranks";
  std::map<int64_t, int64_t> times;
  for (const auto& [epoch, in_epoch] : t.times) {
    for (const auto& [index, n] : in_epoch) times[index] += n;
  }
  ASSERT_EQ(static_cast<int64_t>(times.size()), split) << "a sample was never trained";
  int64_t short_one = 0, total = 0;
  for (const auto& [index, n] : times) {
    EXPECT_TRUE(n == 2 || n == 1) << "sample " << index << " trained " << n << " times in two epochs";
    short_one += n == 1 ? 1 : 0;
    total += n;
  }
  EXPECT_EQ(short_one, deferred_past_end);
  EXPECT_EQ(total, 2 * split - deferred_past_end);
}

// The model ranks' losses: per rank, its training losses of the last round and its final validation.
std::map<int, std::pair<std::vector<double>, double>> model_losses(const fs::path& run_dir) {
  std::map<int, std::pair<std::vector<double>, double>> losses;
  for (const auto& file : fs::directory_iterator(run_dir / "ranks")) {
    const json stats = json::parse(slurp(file.path()));
    if (stats.value("role", "") != "model") continue;
    losses[stats["rank"].get<int>()] = {stats["losses"].get<std::vector<double>>(),
                                        stats["validation"].back()["loss"].get<double>()};
  }
  return losses;
}

json restarts_of(const fs::path& run_dir) { return json::parse(slurp(run_dir / "restarts.json")); }

TEST_F(InJobRestart, AKilledRankIsRestartedFromTheCheckpointAndTrainsEverySampleOnceBitForBit) {
  const fs::path root = test::scratch_dir("restart-test", "killed");
  const fs::path run_dir = root / "run";
  SupervisedJob job(supervised(run_dir, 30, "-n " + std::to_string(ranks) + " --max-restarts 2"), root / "output.txt");
  ASSERT_TRUE(job.fault_when("step 6/", run_dir, 2, SIGKILL)) << slurp(job.log);
  ASSERT_EQ(job.wait(), 0) << slurp(job.log);
  const std::string output = slurp(job.log);

  const json record = restarts_of(run_dir);
  EXPECT_EQ(record["outcome"], "finished");
  ASSERT_EQ(record["restarts"].size(), 1u) << record.dump(2);
  const json& restart = record["restarts"][0];
  EXPECT_EQ(restart["fault"]["kind"], "killed");
  EXPECT_EQ(restart["fault"]["rank"], 2);
  EXPECT_EQ(restart["fault"]["signal"], 9);
  EXPECT_EQ(restart["fault"]["host"], this_host());
  EXPECT_GE(restart["resumed_from_step"].get<int64_t>(), 4) << "the checkpoint at step 4 or later";
  EXPECT_GT(restart["lost_s"].get<double>(), 0.0);
  EXPECT_EQ(restart["first_step_again"].get<int64_t>(), restart["resumed_from_step"].get<int64_t>() + 1);
  ASSERT_EQ(record["rounds"].size(), 2u);
  EXPECT_EQ(record["rounds"][1]["resume"], true);
  EXPECT_NE(output.find("restart 1 of 2: rank 2 (host " + this_host() + ") was killed by signal 9"), std::string::npos)
      << output;
  expect_every_sample_once(run_dir, output);

  // The same run without a fault: the same final losses, bit for bit.
  const fs::path plain = root / "plain";
  const auto uninterrupted = test::run_command(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " +
                                               std::to_string(ranks) + " " + SLUICE_BINARY + " " + train_args(30) +
                                               " --run-dir " + plain.string());
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  const auto restarted_losses = model_losses(run_dir), plain_losses = model_losses(plain);
  ASSERT_EQ(restarted_losses.size(), size_t{model_ranks});
  for (const auto& [rank, losses] : restarted_losses) {
    const auto& [steps, validation] = losses;
    const auto& [plain_steps, plain_validation] = plain_losses.at(rank);
    ASSERT_FALSE(steps.empty());
    ASSERT_LE(steps.size(), plain_steps.size());
    EXPECT_EQ(validation, plain_validation) << "rank " << rank << "'s final validation loss";
    // The restarted round's losses are the last steps of the uninterrupted run's.
    const std::vector<double> tail(plain_steps.end() - static_cast<ptrdiff_t>(steps.size()), plain_steps.end());
    EXPECT_EQ(steps, tail) << "rank " << rank;
  }

  // The report shows the restart and the time it lost.
  const json report = json::parse(slurp(run_dir / "report.json"));
  bool shown = false;
  for (const auto& verdict : report["verdicts"]) shown |= verdict["kind"] == "restarts";
  EXPECT_TRUE(shown) << report["verdicts"].dump(2);
  EXPECT_NE(slurp(run_dir / "report.md").find("## Restarts"), std::string::npos);
}

TEST_F(InJobRestart, ARankStoppedPastItsDeadlineIsNamedSilentAndTheJobRestarts) {
  const fs::path root = test::scratch_dir("restart-test", "stopped");
  const fs::path run_dir = root / "run";
  SupervisedJob job(supervised(run_dir, 4, "-n " + std::to_string(ranks) + " --max-restarts 1"), root / "output.txt");
  ASSERT_TRUE(job.fault_when("step 5/", run_dir, 3, SIGSTOP)) << slurp(job.log);
  ASSERT_EQ(job.wait(), 0) << slurp(job.log);
  const json record = restarts_of(run_dir);
  ASSERT_EQ(record["restarts"].size(), 1u) << record.dump(2);
  const json& restart = record["restarts"][0];
  EXPECT_EQ(restart["fault"]["kind"], "silent") << restart.dump(2);
  EXPECT_EQ(restart["fault"]["rank"], 3);
  EXPECT_EQ(restart["fault"]["host"], this_host());
  EXPECT_GE(restart["fault"]["silent_s"].get<double>(), 4.0);
  // Lost: at least the silence (the deadline) before it was named.
  EXPECT_GE(restart["lost_s"].get<double>(), 4.0);
  EXPECT_EQ(record["outcome"], "finished");
  expect_every_sample_once(run_dir, slurp(job.log));
}

TEST_F(InJobRestart, ARoundBelowTheMinimumOfModelRanksStopsWithExitOne) {
  const fs::path root = test::scratch_dir("restart-test", "too-few");
  const fs::path run_dir = root / "run";
  // One host: once it is left out (after one fault) no model rank is left.
  SupervisedJob job(supervised(run_dir, 30, "--hosts " + this_host() + ":" + std::to_string(ranks) +
                                                " --leave-out-after 1 --max-restarts 3"),
                    root / "output.txt");
  ASSERT_TRUE(job.fault_when("step 3/", run_dir, 1, SIGKILL)) << slurp(job.log);
  EXPECT_EQ(job.wait(), 1) << slurp(job.log);
  const json record = restarts_of(run_dir);
  EXPECT_EQ(record["outcome"], "too_few_ranks") << record.dump(2);
  ASSERT_EQ(record["left_out"].size(), 1u);
  EXPECT_EQ(record["left_out"][0]["host"], this_host());
  EXPECT_EQ(record["rounds"].size(), 1u) << "no round below the minimum";
  EXPECT_NE(slurp(job.log).find("fewer than --min-model-ranks 1"), std::string::npos) << slurp(job.log);
}

}  // namespace
}  // namespace sluice
