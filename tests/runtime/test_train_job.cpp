// `sluice train` end to end: the real binary, real mpirun ranks, the real libtorch model on the
// sample corpus's cache.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/corpus_edit.h"
#include "tests/support/interrupt_ranks.h"
#include "tests/support/small_disk.h"

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
  // The report reads the one process ("data+model") as a model rank too: it judges its steps.
  std::ifstream report_md(run_dir / "report.md");
  const std::string report((std::istreambuf_iterator<char>(report_md)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(report.empty());
  EXPECT_EQ(report.find("no model-rank timelines"), std::string::npos) << report;
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

double first_loss(const fs::path& run_dir, int rank) { return losses(run_dir, rank).front(); }

// train.normalize_mels: the data side normalises with the cache's statistics, so the model's
// first loss is on unit-scale targets (raw log-mels lie around -5); masks on top still train.
// One model rank either way, so both runs see the same first batch from the same initial weights.
TEST_F(TrainJob, NormalisedMelsAreWhatTheModelSees) {
  const fs::path plain = scratch("plain"), normalised = scratch("normalised");
  ASSERT_EQ(run(train(1, plain, 3)).exit_code, 0);
  const auto result = run(train(2, normalised, 6,
                                "--set train.normalize_mels=true --set train.time_masks=2 --set train.freq_masks=1"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("data ranks: normalise 80 mel bins with the cache's statistics; mask 2 x <= 20 "
                               "frames and 1 x <= 8 mel bins per sample on cpu"),
            std::string::npos)
      << result.output;
  EXPECT_LT(first_loss(normalised, 1), 0.5 * first_loss(plain, 0));
  for (const auto& point : read_json(normalised / "ranks" / "rank-1.json")["validation"]) {
    EXPECT_TRUE(std::isfinite(point["loss"].get<double>()));
  }
}

TEST_F(TrainJob, NormalisingWithoutStatisticsIsRefused) {
  // A cache as an older prep wrote it: no statistics in its manifest.
  const fs::path old_cache = scratch("old-cache");
  fs::remove_all(old_cache);
  fs::copy(cache_, old_cache, fs::copy_options::recursive);
  json manifest = read_json(old_cache / "manifest.json");
  ASSERT_TRUE(manifest.contains("mel_statistics"));
  manifest.erase("mel_statistics");
  std::ofstream(old_cache / "manifest.json") << manifest.dump(2);
  const auto result = run(std::string(SLUICE_BINARY) + " train --cache " + old_cache.string() + " --run-dir " +
                          scratch("no-statistics").string() + " --steps 2 --set train.normalize_mels=true");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("has no mel statistics"), std::string::npos) << result.output;
}

// A step that fails names its batch and the sample with the longest text (issue 27: a 100 KB
// transcript, let into the cache here by raising prep's caps, failed every model rank with "tried
// to allocate 167772160000 bytes" and nothing else). The allocation refused is the machine's
// refusal (exit 5, with what to lower), as any out-of-memory in a step.
TEST_F(TrainJob, AFailedStepNamesItsBatchAndItsLongestText) {
  const fs::path corpus = scratch("long-text") / "corpus";
  std::string words;
  for (int i = 0; i < 20000; ++i) words += "word ";
  test::copy_corpus_with_text(SLUICE_SAMPLE_CORPUS, corpus, "LJS-EN-0007", words);
  const fs::path cache = scratch("long-text-cache");
  const auto prep = run(std::string(SLUICE_BINARY) + " prep --corpus " + corpus.string() + " --out " + cache.string() +
                        " --set prep.max_tokens=1000000 --set prep.max_tokens_per_second=1000000");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  // Every batch of the sample's bucket is padded to its 100,000 tokens; none is held out.
  const auto result = run(std::string(SLUICE_BINARY) + " train --cache " + cache.string() + " --run-dir " +
                          scratch("long-text-run").string() + " --steps 30 --set train.batch_size=4 " +
                          "--set train.n_buckets=2 --set train.validation_fraction=0");
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_NE(result.output.find("out of memory: the model's train_step could not get memory"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("its bucket's longest text: sample LJS-EN-0007, 99999 tokens for"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("a batch of 4 samples padded to"), std::string::npos) << result.output;
}

// A resume on fewer ranks reports that run's ranks only (issue 27: 4 ranks for 12 steps, then
// --resume on 2, and report.json listed model ranks [1, 2, 3]); the earlier attempt's files are kept
// in attempts/1/, and a stray copy of a timeline is left out of the report with a note.
TEST_F(TrainJob, AReportCoversExactlyTheRanksOfItsRun) {
  const fs::path run_dir = scratch("attempts");
  const auto first = run(train(4, run_dir, 12));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run(train(2, run_dir, 16, "--resume"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  auto model_ranks = [](const json& report) {
    std::vector<int> ranks;
    for (const auto& m : report["model_ranks"]) ranks.push_back(m["rank"].get<int>());
    return ranks;
  };
  EXPECT_EQ(model_ranks(read_json(run_dir / "report.json")), std::vector<int>({1}));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(fs::exists(run_dir / "attempts" / "1" / "timeline" / ("rank-" + std::to_string(rank) + ".json"))) << rank;
  }
  EXPECT_FALSE(fs::exists(run_dir / "timeline" / "rank-2.json"));

  fs::copy_file(run_dir / "timeline" / "rank-1.json", run_dir / "timeline" / "rank-3.json");
  const auto report = run(std::string(SLUICE_BINARY) + " report " + run_dir.string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const json j = read_json(run_dir / "report.json");
  EXPECT_EQ(model_ranks(j), std::vector<int>({1}));
  EXPECT_EQ(j["ignored_timelines"]["count"], 1);
  std::ifstream md(run_dir / "report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("rank-3.json: no rank 3 in this 2-rank run"), std::string::npos) << text;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Errors that end a multi-rank job under mpirun (issue 27): said once, by the rank that saw them,
// with the contract's exit code, and no rank waits out a deadline for a peer that already failed.

// A run directory below a file: rank 0 cannot make it. Every rank stops at once with its error (the
// other ranks once waited out runtime.timeout_s, 125 s at the default, and exited 1).
TEST_F(TrainJob, ARunDirectoryThatCannotBeMadeEndsEveryRankAtOnce) {
  const fs::path file = scratch("a-file") / "not-a-directory";
  std::ofstream(file) << "x";
  const auto started = std::chrono::steady_clock::now();
  const auto result = run(train(3, file / "run", 4));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
  EXPECT_EQ(count(result.output, "cannot create the run directory"), 1u) << result.output;
}

// The model ranks' checkpoint was written for another model size: their error is the one said, once
// per model rank, and the job exits 2 (once only the data rank's "the receiver aborted" showed, exit 1).
TEST_F(TrainJob, AResumedModelOfAnotherSizeIsSaidByTheModelRankWithExitTwo) {
  const fs::path run_dir = scratch("resume-other-size");
  const auto first = run(train(2, run_dir, 4));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto result = run(train(2, run_dir, 8, "--resume --set model.size=small"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("[rank 1 @ "), std::string::npos) << result.output;
  EXPECT_EQ(count(result.output, "[error] config error:"), 1u) << result.output;
  EXPECT_NE(result.output.find("small"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("[error] transport error"), std::string::npos) << result.output;
}

// The first model rank's checkpoint does not fit its file system: "no space left on device" naming
// the file, once, and the job exits 5 as in one process (it exited 1 under mpirun).
TEST_F(TrainJob, ACheckpointOnAFullDiskExitsFiveUnderMpirun) {
  test::SmallDisk disk(scratch("full-disk") / "mnt");
  // The run directory's first files fit; a tiny model's checkpoint (about 13 MB) does not.
  if (!disk.resize(2 * 1024)) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  const auto result = run(train(3, disk.path() / "run", 6, "--set train.checkpoint_every=3"));
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_EQ(count(result.output, "no space left on device"), 1u) << result.output;
  EXPECT_NE(result.output.find("step-0000000003.pt"), std::string::npos) << result.output;
}

// A Python rank that exits without ever joining (issue 27: `mpirun -np 1 sluice train ... : -np 2
// python3 -c "print(1)"` printed nothing for over 150 s with runtime.timeout_s=10): the sluice rank
// says a rank never joined after runtime.timeout_s, and the job ends non-zero.
TEST_F(TrainJob, APythonRankThatNeverJoinsEndsTheJobAfterTheTimeout) {
  const auto started = std::chrono::steady_clock::now();
  const auto result = run(std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 1 " + SLUICE_BINARY +
                          " train --cache " + cache_.string() + " --run-dir " + scratch("never-joined").string() +
                          " --steps 4 --set runtime.timeout_s=5 : -np 2 /usr/bin/python3 -c 'print(1)'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
  EXPECT_NE(result.output.find("a rank never joined"), std::string::npos) << result.output;
}

// GPU runs (CTest label gpu): skipped without an NVIDIA device, run on the GPU machine.
int visible_gpus() {
  const auto listed = test::run_command("nvidia-smi -L 2>/dev/null");
  int count = 0;
  for (size_t at = listed.output.find("GPU "); at != std::string::npos; at = listed.output.find("\nGPU ", at + 1)) {
    ++count;
  }
  return listed.exit_code == 0 ? count : 0;
}

class TrainJobGpu : public TrainJob {
 protected:
  void SetUp() override {
    if (visible_gpus() == 0) GTEST_SKIP() << "no NVIDIA GPU visible (nvidia-smi -L)";
  }
};

TEST_F(TrainJobGpu, OneProcessTrainsOnTheGpu) {
  const fs::path run_dir = scratch("gpu-one-process");
  const auto result = run(train(1, run_dir, 40, "--set model.device=cuda"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto trained = losses(run_dir, 0);
  ASSERT_EQ(trained.size(), 40u);
  EXPECT_LT(mean(trained, 35, 40), 0.8 * mean(trained, 0, 5));
}

// Rank 0 prepares and rank 1 trains on the same GPU: CUDA IPC (NCCL refuses two ranks on one
// GPU), with normalisation and masks on the data rank's GPU and the model rank's torch capped.
TEST_F(TrainJobGpu, TwoRanksShareOneGpuOverCudaIpc) {
  const fs::path run_dir = scratch("gpu-cuda-ipc");
  const auto result = run(train(2, run_dir, 40,
                                "--set model.device=cuda --set train.normalize_mels=true --set train.time_masks=2 "
                                "--set roles.model_gpu_memory_fraction=0.5 --set roles.data_gpu_memory_fraction=0.1"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("transport cuda_ipc"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("mel bins per sample on cuda:0"), std::string::npos) << result.output;
  const auto trained = losses(run_dir, 1);
  ASSERT_EQ(trained.size(), 40u);
  EXPECT_LT(mean(trained, 35, 40), 0.8 * mean(trained, 0, 5));
  EXPECT_GT(read_json(run_dir / "ranks" / "rank-0.json")["device_seconds"].get<double>(), 0.0);
  std::ifstream timeline(run_dir / "timeline" / "rank-0.json");
  const std::string spans((std::istreambuf_iterator<char>(timeline)), std::istreambuf_iterator<char>());
  EXPECT_NE(spans.find("host_to_device"), std::string::npos);
  EXPECT_NE(spans.find("gpu_work"), std::string::npos);
}

// A cap far below what the model needs: torch's allocator refuses, and the run says so.
TEST_F(TrainJobGpu, ModelMemoryFractionIsEnforced) {
  const auto result = run(train(1, scratch("gpu-capped"), 3,
                                "--set model.device=cuda --set roles.model_gpu_memory_fraction=0.0001"));
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("out of memory"), std::string::npos) << result.output;
}

// Two GPUs: rank 0 prepares on GPU 0, rank 1 trains on GPU 1, batches over NCCL.
TEST_F(TrainJobGpu, DualGpuFeedsOverNccl) {
  if (visible_gpus() < 2) GTEST_SKIP() << "needs two GPUs";
  const fs::path run_dir = scratch("gpu-nccl");
  const auto result = run(train(2, run_dir, 30, "--set model.device=cuda --set train.normalize_mels=true"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("transport nccl"), std::string::npos) << result.output;
  EXPECT_EQ(losses(run_dir, 1).size(), 30u);
}

// A data rank that stops answering (SIGSTOP: alive but silent) is named by the model ranks
// waiting for its batches, and the job ends non-zero within twice runtime.timeout_s.
TEST_F(TrainJob, SilentDataRankIsNamedAndTheJobEnds) {
  const fs::path run_dir = scratch("silent");
  // One credit: the model ranks hold at most one batch sent before the stop, so the deadline
  // starts almost at once and the measurement is not stretched by slow steps on a loaded CI.
  const auto result = test::interrupt_ranks(
      train(3, run_dir, 100000, "--set runtime.timeout_s=4 --set train.credits=1 --set train.read_ahead=1"),
      run_dir, SIGSTOP, {0});
  ASSERT_GE(result.seconds, 0) << "the run did not start training:\n" << result.output;
  EXPECT_LT(result.seconds, 2 * 4.0) << result.output;
  EXPECT_TRUE(WIFEXITED(result.status) && WEXITSTATUS(result.status) != 0) << result.output;
  // A model rank waiting for its batch names the data rank. A model rank already waiting in the
  // gradient all-reduce waits on (it waits on a live rank) and names nobody: only rank 0 is
  // blamed (common/heartbeat.h, LIVENESS).
  bool reported = false;
  for (const char* model_rank : {"[rank 1 @ ", "[rank 2 @ "}) {
    for (auto at = result.output.find(model_rank); at != std::string::npos; at = result.output.find(model_rank, at + 1)) {
      reported |= result.output.substr(at, 200).find("[error] transport error") != std::string::npos;
    }
  }
  EXPECT_TRUE(reported) << "no model rank reported\n" << result.output;
  EXPECT_NE(result.output.find("from its data rank 0 (host "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("waiting for global step"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rank 0 (host "), std::string::npos) << result.output;
  for (const char* innocent : {"rank 1 (host ", "rank 2 (host "}) {
    for (const char* blame : {" gave no sign of life", " has given no sign of life"}) {
      const std::string line = std::string(innocent);
      for (auto at = result.output.find(line); at != std::string::npos; at = result.output.find(line, at + 1)) {
        const auto end = result.output.find(')', at);
        EXPECT_NE(result.output.compare(end + 1, std::strlen(blame), blame), 0) << "an innocent rank was blamed\n"
                                                                                << result.output;
      }
    }
  }
}

// A data rank killed outright: mpirun ends the whole job at once and names the dead rank.
TEST_F(TrainJob, KilledDataRankEndsTheJobAndIsNamed) {
  const fs::path run_dir = scratch("killed");
  const auto result = test::interrupt_ranks(train(3, run_dir, 100000, "--set runtime.timeout_s=4"), run_dir, SIGKILL, {0});
  ASSERT_GE(result.seconds, 0) << "the run did not start training:\n" << result.output;
  EXPECT_LT(result.seconds, 2 * 4.0) << result.output;
  EXPECT_TRUE(WIFEXITED(result.status) && WEXITSTATUS(result.status) != 0) << result.output;
  EXPECT_NE(result.output.find("rank 0"), std::string::npos) << result.output;
}

// Preemption as Slurm does it: SIGTERM to every task. The run checkpoints at a step boundary,
// exits with 4, and --resume continues from the next unseen batch.
TEST_F(TrainJob, SigtermCheckpointsAndResumeContinues) {
  const fs::path run_dir = scratch("preempted");
  const auto result = test::interrupt_ranks(train(3, run_dir, 100000), run_dir, SIGTERM, {0, 1, 2});
  ASSERT_GE(result.seconds, 0) << "the run did not start training:\n" << result.output;
  EXPECT_TRUE(WIFEXITED(result.status) && WEXITSTATUS(result.status) == 4) << result.output;
  EXPECT_NE(result.output.find("SIGTERM received: stopped after global step"), std::string::npos) << result.output;
  const int64_t stopped = read_json(run_dir / "checkpoints" / "latest.json")["global_step"].get<int64_t>();
  EXPECT_GE(stopped, 5);
  EXPECT_EQ(read_json(run_dir / "ranks" / "rank-1.json")["stopped_at"], stopped);

  const auto resumed = run(train(3, run_dir, static_cast<int>(stopped) + 3, "--resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at global step " + std::to_string(stopped)), std::string::npos) << resumed.output;
  EXPECT_EQ(read_json(run_dir / "ranks" / "rank-1.json")["steps"], 3);
}

// A stop signal that reaches only some ranks (SIGUSR1 to the data rank alone, then to one model
// rank alone, not to mpirun) stops the run at one step all the same: the data rank passes its
// signal on in the batches it sends, the model ranks agree, the data rank takes its closed
// channels as the stop. Every rank's timeline says stopped, a checkpoint is written, exit 4.
TEST_F(TrainJob, SignalToOneRankStopsEveryRankAtOneStep) {
  for (const int target : {0, 2}) {
    SCOPED_TRACE("SIGUSR1 to rank " + std::to_string(target) + " only");
    const fs::path run_dir = scratch("stopped-by-rank-" + std::to_string(target));
    const auto result = test::interrupt_ranks(train(3, run_dir, 100000), run_dir, SIGUSR1, {target});
    ASSERT_GE(result.seconds, 0) << "the run did not start training:\n" << result.output;
    EXPECT_TRUE(WIFEXITED(result.status) && WEXITSTATUS(result.status) == 4) << result.output;
    EXPECT_NE(result.output.find("a stop signal on another rank: stopped after global step"), std::string::npos)
        << result.output;  // model rank 1 logs; the signal reached rank 0 or 2
    const int64_t stopped = read_json(run_dir / "checkpoints" / "latest.json")["global_step"].get<int64_t>();
    EXPECT_GE(stopped, 5);
    for (int rank : {1, 2}) EXPECT_EQ(read_json(run_dir / "ranks" / ("rank-" + std::to_string(rank) + ".json"))["stopped_at"], stopped);
    for (int rank : {0, 1, 2}) {
      EXPECT_EQ(read_json(run_dir / "timeline" / ("rank-" + std::to_string(rank) + ".json"))["status"], "stopped") << rank;
    }
    EXPECT_TRUE(read_json(run_dir / "ranks" / "rank-0.json").contains("stopped"));
  }
}

}  // namespace
}  // namespace sluice
