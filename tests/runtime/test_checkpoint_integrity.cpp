// Checkpoints that are damaged, cut short or mixed up, made from outside the process: the real
// `sluice train` binary writes them, the test flips bytes, truncates files or reuses the run
// directory, then runs the binary again and checks what it says, what it resumed from and what
// is left on disk (runtime/train/checkpoints.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CommandResult;

CommandResult run(const std::string& command) { return test::run_command(command); }
fs::path scratch(const std::string& name) { return test::scratch_dir("checkpoint-test", name); }

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

json read_json(const fs::path& path) { return json::parse(slurp(path)); }

std::string checkpoint(int step, const char* extension = ".pt") {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%010d%s", step, extension);
  return name;
}

// Inverts 64 bytes in the middle of `path`, as a bad disk block or a stray write would.
void flip_bytes_in_the_middle(const fs::path& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto middle = static_cast<std::streamoff>(fs::file_size(path) / 2);
  char bytes[64];
  file.seekg(middle);
  file.read(bytes, sizeof(bytes));
  for (char& byte : bytes) byte = static_cast<char>(~byte);
  file.seekp(middle);
  file.write(bytes, sizeof(bytes));
}

// Every file under `dir` with its bytes: what "left intact" compares. train.lock is not a run's
// data: every train, refused or not, takes it and writes its own pid there.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename() != "train.lock") {
      files[fs::relative(entry.path(), dir).string()] = slurp(entry.path());
    }
  }
  return files;
}

std::vector<double> losses(const fs::path& run_dir) {
  return read_json(run_dir / "ranks" / "rank-0.json")["losses"].get<std::vector<double>>();
}

class CheckpointIntegrity : public ::testing::Test {
 protected:
  // A cache of the sample corpus.
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = scratch("cache");
    const auto prep = run(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " +
                          cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
  }

  // The smallest run that checkpoints: tiny model, small batches, a checkpoint every step.
  static std::string train(const fs::path& run_dir, int steps, const std::string& extra = "", int ranks = 1) {
    const std::string launcher =
        ranks > 1 ? std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " "
                  : "";
    return launcher + SLUICE_BINARY + " train --cache " + cache_.string() + " --run-dir " + run_dir.string() +
           " --steps " + std::to_string(steps) +
           " --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10 --set train.log_every=1"
           " --set train.validation_every=0 --set train.checkpoint_every=1 " + extra;
  }

  // A copy of one finished 3-step run with a checkpoint after every step (step-1, step-2,
  // step-3), made once per test process: each test damages its own copy.
  static fs::path copy_of_pristine(const std::string& name) {
    if (pristine_.empty()) {
      const fs::path made = scratch("pristine");
      const auto trained = run(train(made, 3));
      EXPECT_EQ(trained.exit_code, 0) << trained.output;
      for (int step : {1, 2, 3}) EXPECT_TRUE(fs::exists(made / "checkpoints" / checkpoint(step))) << step;
      pristine_ = made;
    }
    const fs::path run_dir = scratch(name);
    fs::copy(pristine_, run_dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return run_dir;
  }

  static fs::path cache_, pristine_;
};
fs::path CheckpointIntegrity::cache_, CheckpointIntegrity::pristine_;

// Bytes flipped in the newest checkpoint: the resume names it with both checksums, resumes from
// the step before (on a data rank and a model rank alike), and trains on exactly as the first
// run did from there; the good checkpoints are untouched and the damaged one is replaced.
TEST_F(CheckpointIntegrity, DamagedNewestCheckpointIsNamedAndTheOneBeforeIsResumedFrom) {
  const fs::path run_dir = copy_of_pristine("flipped");
  const fs::path damaged = run_dir / "checkpoints" / checkpoint(3);
  flip_bytes_in_the_middle(damaged);
  const auto good_before = snapshot(run_dir / "checkpoints");
  const auto first_losses = losses(run_dir);

  const auto result = run(train(run_dir, 3, "--resume", 2));  // 1 data rank + 1 model rank
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("checkpoint " + damaged.string() + " has checksum xxh64 "), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find(", its record says " + read_json(pristine_ / "checkpoints" / checkpoint(3, ".json"))
                                                          ["xxh64"].get<std::string>()),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("resuming from " + (run_dir / "checkpoints" / checkpoint(2)).string() +
                               " (global step 2), the newest good checkpoint"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("resumed from " + checkpoint(2) + " at global step 2"), std::string::npos)
      << result.output;
  // One step (2 -> 3) with the first run's third loss: the state of step 2 was loaded (equal up to
  // the order of torch's sums: this model rank computes with fewer threads than the one process).
  const json stats = read_json(run_dir / "ranks" / "rank-1.json");
  ASSERT_EQ(stats["steps"], 1);
  EXPECT_NEAR(stats["losses"][0].get<double>(), first_losses.at(2), 1e-4 * first_losses.at(2));
  // The good checkpoints are as they were; step 3 was written anew and verifies.
  for (int step : {1, 2}) {
    EXPECT_EQ(slurp(run_dir / "checkpoints" / checkpoint(step)), good_before.at(checkpoint(step))) << step;
  }
  const json latest = read_json(run_dir / "checkpoints" / "latest.json");
  EXPECT_EQ(latest["global_step"], 3);
  EXPECT_EQ(latest["bytes"].get<uintmax_t>(), fs::file_size(damaged));
  EXPECT_FALSE(fs::exists(damaged.string() + ".damaged"));  // replaced by the new step 3, not set aside
}

// Every checkpoint damaged (flipped, cut short, record missing): exit 2, each file named, and
// nothing deleted or changed.
TEST_F(CheckpointIntegrity, NoGoodCheckpointStopsWithEveryDamagedFileNamed) {
  const fs::path run_dir = copy_of_pristine("all-damaged");
  const fs::path dir = run_dir / "checkpoints";
  flip_bytes_in_the_middle(dir / checkpoint(3));
  fs::resize_file(dir / checkpoint(2), fs::file_size(dir / checkpoint(2)) / 3);
  fs::remove(dir / checkpoint(1, ".json"));
  const auto before = snapshot(dir);

  const auto result = run(train(run_dir, 4, "--resume"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("no good checkpoint in " + dir.string()), std::string::npos) << result.output;
  EXPECT_NE(result.output.find((dir / checkpoint(3)).string() + " has checksum xxh64"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find((dir / checkpoint(2)).string() + " is " +
                               std::to_string(fs::file_size(dir / checkpoint(2))) + " bytes, its record says " +
                               std::to_string(fs::file_size(pristine_ / "checkpoints" / checkpoint(2)))),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find((dir / checkpoint(1)).string() + " has no record"), std::string::npos)
      << result.output;
  EXPECT_EQ(snapshot(dir), before);
}

// What a kill -9 during a save leaves, and a latest.json cut short: the resume names
// latest.json, passes over the unrecorded step-5.pt, resumes from step 3; the save of step 4
// removes the temporary and sets the leftover step-5.pt aside instead of counting it.
TEST_F(CheckpointIntegrity, BrokenLatestJsonAndLeftoversOfAKilledSaveAreNamedAndCleared) {
  const fs::path run_dir = copy_of_pristine("killed-save");
  const fs::path dir = run_dir / "checkpoints";
  const std::string latest = slurp(dir / "latest.json");
  std::ofstream(dir / "latest.json", std::ios::trunc) << latest.substr(0, latest.size() / 2);
  const std::string newest = slurp(dir / checkpoint(3));
  std::ofstream(dir / checkpoint(5), std::ios::binary) << newest;  // renamed into place, killed before its record
  std::ofstream(dir / (checkpoint(6) + ".tmp-4242"), std::ios::binary) << newest.substr(0, 1000);  // mid-write

  const auto result = run(train(run_dir, 4, "--resume"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find((dir / "latest.json").string() + " is not valid JSON"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find((dir / checkpoint(5)).string() + " has no record"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("resumed from " + checkpoint(3) + " at global step 3"), std::string::npos)
      << result.output;
  EXPECT_EQ(read_json(dir / "latest.json")["global_step"], 4);
  EXPECT_FALSE(fs::exists(dir / (checkpoint(6) + ".tmp-4242")));
  EXPECT_FALSE(fs::exists(dir / checkpoint(5)));
  EXPECT_TRUE(fs::exists(dir / (checkpoint(5) + ".damaged")));
  // The last three of this run: 2 and 3 (the first run's) and 4.
  EXPECT_FALSE(fs::exists(dir / checkpoint(1)));
  for (int step : {2, 3}) EXPECT_EQ(slurp(dir / checkpoint(step)), slurp(pristine_ / "checkpoints" / checkpoint(step)));
  EXPECT_TRUE(fs::exists(dir / checkpoint(4)) && fs::exists(dir / checkpoint(4, ".json")));
}

// Settings that make the weights blow up (decoupled weight decay of lr x 10 = 100 flips and
// scales every weight by -99 per step) until the loss overflows: the run stops with an error
// naming the step and the rank, and no checkpoint is made from there on: latest.json names the
// last one written before that step, which verifies, and nothing after it exists.
TEST_F(CheckpointIntegrity, NonFiniteLossStopsTheRunWithoutACheckpoint) {
  const fs::path run_dir = scratch("diverged");
  const auto result = run(train(run_dir, 30, "--set optim.lr=10 --set optim.weight_decay=10 --set optim.grad_clip=0 "
                                             "--set optim.warmup_steps=0"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  const std::string said = "the training loss is not finite at global step ";
  const auto at = result.output.find(said);
  ASSERT_NE(at, std::string::npos) << result.output;
  const int step = std::stoi(result.output.substr(at + said.size()));
  EXPECT_NE(result.output.find("on model rank 0 (host ", at), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("Stopped without writing a checkpoint; the newest, " + checkpoint(step) +
                                   " (global step " + std::to_string(step) + "), holds the last finite state",
                               at),
            std::string::npos)
      << result.output;
  // The checkpoint after the last finite step is the newest and whole; none after it.
  const fs::path dir = run_dir / "checkpoints";
  const json latest = read_json(dir / "latest.json");
  EXPECT_EQ(latest["global_step"], step);
  EXPECT_EQ(latest["bytes"].get<uintmax_t>(), fs::file_size(dir / checkpoint(step)));
  EXPECT_FALSE(fs::exists(dir / checkpoint(step + 1)));
  // The last three are kept: step - 2 .. step (fewer when the loss overflowed that early).
  for (int kept = std::max(1, step - 2); kept <= step; ++kept) EXPECT_TRUE(fs::exists(dir / checkpoint(kept))) << kept;
}

// A second run into the directory of a first, without --resume: refused before anything is
// written (exit 2, naming the directory, the checkpoints and both ways out); --overwrite starts
// clean, with none of the first run's checkpoints left; both flags together are refused.
TEST_F(CheckpointIntegrity, ReusedRunDirIsRefusedUnlessOverwritten) {
  const fs::path run_dir = copy_of_pristine("reused");
  const auto before = snapshot(run_dir);
  auto result = run(train(run_dir, 2));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("train.run_dir " + run_dir.string() + " holds 3 checkpoint(s) of an earlier run (the "
                               "newest: " + checkpoint(3) + ")"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("--resume"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--overwrite"), std::string::npos) << result.output;
  EXPECT_EQ(snapshot(run_dir), before);

  result = run(train(run_dir, 2, "--resume --overwrite"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_EQ(snapshot(run_dir), before);

  result = run(train(run_dir, 2, "--overwrite"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("--overwrite: deleted 3 checkpoint(s) of an earlier run"), std::string::npos)
      << result.output;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest.json", checkpoint(1, ".json"), checkpoint(1), checkpoint(2, ".json"),
                                             checkpoint(2)}));
  EXPECT_EQ(read_json(run_dir / "checkpoints" / "latest.json")["global_step"], 2);
  EXPECT_EQ(read_json(run_dir / "ranks" / "rank-0.json")["steps"], 2);
  // Same settings and seed as the first run: the new run's first two losses are the first run's.
  const auto now = losses(run_dir);
  ASSERT_EQ(now.size(), 2u);
  const auto first = losses(pristine_);
  EXPECT_EQ(now, std::vector<double>(first.begin(), first.begin() + 2));
}

// A --resume that is refused (here: another batch plan than the checkpoint's) and a fresh run
// refused for the earlier run's checkpoints, the latter on another cache: neither touches a byte
// of the earlier run, its sluice-train.yaml, padding.json and cache.json included.
TEST_F(CheckpointIntegrity, RefusedRunsLeaveTheEarlierRunsFilesAsTheyWere) {
  const fs::path run_dir = copy_of_pristine("refused");
  const auto before = snapshot(run_dir);
  ASSERT_EQ(before.count("sluice-train.yaml"), 1u);
  ASSERT_EQ(before.count("padding.json"), 1u);
  ASSERT_EQ(before.count("cache.json"), 1u);

  auto result = run(train(run_dir, 6, "--resume --set train.batch_size=2"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_EQ(snapshot(run_dir), before) << result.output;

  const fs::path other_cache = scratch("other-cache");
  const auto prep = run(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS + " --out " +
                        other_cache.string() + " --set cache.shard_size=16");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  std::string fresh = train(run_dir, 2);
  fresh.replace(fresh.find(cache_.string()), cache_.string().size(), other_cache.string());
  result = run(fresh);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("holds 3 checkpoint(s) of an earlier run"), std::string::npos) << result.output;
  EXPECT_EQ(snapshot(run_dir), before) << result.output;
}

// Two trains into one run directory at once: the second, --resume or not, is refused at once
// (exit 2) naming the first's pid and host and RUN_DIR/train.lock, and writes nothing; the first
// goes on, and stops with its checkpoint on SIGTERM. A lock file left by a finished or killed
// train blocks nobody (the pristine copy carries one).
TEST_F(CheckpointIntegrity, SecondTrainIntoARunningRunDirIsRefusedNamingTheFirst) {
  const fs::path run_dir = copy_of_pristine("concurrent");
  CommandResult first{-1, ""};
  std::thread first_run([&] { first = run(train(run_dir, 100000, "--resume --set train.checkpoint_every=1000")); });
  // The first train holds the lock once its pid is in the file.
  const fs::path lock = run_dir / "train.lock";
  long long pid = -1;
  for (int i = 0; i < 600 && pid < 0; ++i) {
    try {
      const json holder = read_json(lock);
      if (holder.at("pid").get<long long>() != 0 && fs::exists(run_dir / "ranks")) pid = holder.at("pid");
    } catch (const std::exception&) {
    }
    // The pristine run's own pid is in the copy until the first train replaces it.
    if (pid >= 0 && ::kill(static_cast<pid_t>(pid), 0) != 0) pid = -1;
    if (pid < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(pid, 0) << "the first train never took " << lock;
  const auto during = snapshot(run_dir / "checkpoints");

  for (const char* flags : {"--resume", "--overwrite", ""}) {
    const auto second = run(train(run_dir, 2, flags));
    EXPECT_EQ(second.exit_code, 2) << flags << "\n" << second.output;
    EXPECT_NE(second.output.find("another train is running in " + run_dir.string() + " (pid " + std::to_string(pid)),
              std::string::npos)
        << flags << "\n" << second.output;
    EXPECT_NE(second.output.find("train.lock is locked"), std::string::npos) << second.output;
  }
  EXPECT_EQ(snapshot(run_dir / "checkpoints"), during);

  ::kill(static_cast<pid_t>(pid), SIGTERM);
  first_run.join();
  EXPECT_EQ(first.exit_code, 4) << first.output;
  EXPECT_GT(read_json(run_dir / "checkpoints" / "latest.json")["global_step"].get<int>(), 3) << first.output;
}

}  // namespace
}  // namespace sluice
