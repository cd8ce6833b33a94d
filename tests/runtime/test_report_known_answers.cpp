// The bottleneck report against causes put there on purpose (debug.delay_*): the real binary,
// real mpirun ranks, the real model, the report written by rank 0 at the end of the run.
// Each case knows its answer: which verdict, which rank, which period, which fraction.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/interrupt_ranks.h"
#include "tests/support/report_json.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::read_json;
using test::verdict;

class ReportKnownAnswers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = test::scratch_dir("report-test", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // 28 steps: 5 warm-up steps dropped leave 22-23 steady ones (the report needs 20). No
  // validation, checkpoint or loss all-reduce inside the window: they have periods of their own.
  static test::CommandResult train(int ranks, const fs::path& run_dir, const std::string& extra, int steps = 28) {
    return test::run_command(train_command(ranks, run_dir, extra, steps));
  }

  static std::string train_command(int ranks, const fs::path& run_dir, const std::string& extra, int steps) {
    return std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " " +
           SLUICE_BINARY + " train --cache " + cache_.string() + " --run-dir " + run_dir.string() +
           " --steps " + std::to_string(steps) +
           " --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10"
           " --set train.log_every=1000 --set train.validation_every=0"
           " --set train.checkpoint_every=0 --set runtime.status_every_s=0 " + extra;
  }

  static fs::path cache_;
};
fs::path ReportKnownAnswers::cache_;

// No delay, the model is the slow part: compute-bound. Then the data rank's cache reads are
// slowed to D = 1.5 s per batch with one reader thread: the data rank paces the run (mean step
// time D), and the model, whose own work per step is W, waits D - W: I/T must be 1 - W/D within
// 3 points. W is the model's time per step outside batch_wait in the same run, so the check holds
// however loaded the machine is.
TEST_F(ReportKnownAnswers, DataRankDelayGivesInputBoundAtTheExpectedFraction) {
  const fs::path baseline_dir = test::scratch_dir("report-test", "baseline");
  auto result = train(2, baseline_dir, "");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("compute-bound"), std::string::npos) << result.output;
  const json baseline = read_json(baseline_dir / "report.json");
  ASSERT_TRUE(baseline["steady_state"]["enough"].get<bool>()) << baseline["steady_state"];
  EXPECT_FALSE(verdict(baseline, "compute_bound").is_null()) << test::verdict_kinds(baseline);
  EXPECT_TRUE(verdict(baseline, "input_bound").is_null()) << test::verdict_kinds(baseline);
  EXPECT_LT(baseline["model_role"]["input_wait_fraction"].get<double>(), 0.05);

  const double delay_s = 1.5;
  const fs::path run_dir = test::scratch_dir("report-test", "input-bound");
  result = train(2, run_dir,
                 "--set debug.delay_stage=cache_read --set debug.delay_ranks=0 --set debug.delay_ms=1500 "
                 "--set train.reader_threads=1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json report = read_json(run_dir / "report.json");
  const json input = verdict(report, "input_bound");
  ASSERT_FALSE(input.is_null()) << test::verdict_kinds(report);
  EXPECT_EQ(input["severity"], "HIGH");
  const json& role = report["model_role"];
  const double step_s = role["step_seconds"]["mean"].get<double>();
  const double own_step_s = step_s - role["stages"]["batch_wait"]["per_step"]["mean"].get<double>();
  EXPECT_NEAR(step_s, delay_s, 0.05 * delay_s) << "the delayed reads pace the run";
  const double measured = role["input_wait_fraction"].get<double>();
  const double expected = 1.0 - own_step_s / delay_s;
  EXPECT_NEAR(measured, expected, 0.03) << "own step " << own_step_s << " s, delay " << delay_s << " s";
  // The sub-cause names the stage the delay was put in.
  EXPECT_NE(input["summary"].get<std::string>().find("cache_read"), std::string::npos) << input;
  EXPECT_NE(input["recommendation"].get<std::string>().find("reader_threads"), std::string::npos) << input;
  EXPECT_EQ(report["injected_delay"]["stage"], "cache_read");
}

// One model rank of two computes 0.8 s longer per step: it, and only it, is the straggler.
TEST_F(ReportKnownAnswers, ModelRankDelayNamesThatRankAsStraggler) {
  const fs::path run_dir = test::scratch_dir("report-test", "straggler");
  const auto result = train(3, run_dir, "--set debug.delay_stage=forward --set debug.delay_ranks=2 --set debug.delay_ms=800");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json report = read_json(run_dir / "report.json");
  int stragglers = 0;
  for (const auto& v : report["verdicts"]) {
    if (v["kind"] != "straggler") continue;
    ++stragglers;
    EXPECT_EQ(v["rank"], 2) << v;
  }
  EXPECT_EQ(stragglers, 1) << test::verdict_kinds(report);
}

// The data rank stalls 1.5 s on every 7th batch and the model holds one batch in hand: step-time
// spikes recur with period 7.
TEST_F(ReportKnownAnswers, EverySeventhBatchDelayGivesCyclicStallWithPeriodSeven) {
  const fs::path run_dir = test::scratch_dir("report-test", "cyclic");
  const auto result = train(2, run_dir,
                            "--set debug.delay_stage=send --set debug.delay_ms=1500 --set debug.delay_every=7 "
                            "--set train.credits=1 --set train.read_ahead=1", 36);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const json report = read_json(run_dir / "report.json");
  const json cyclic = verdict(report, "cyclic_stall");
  ASSERT_FALSE(cyclic.is_null()) << test::verdict_kinds(report);
  EXPECT_EQ(cyclic["numbers"]["period"], 7) << cyclic;
}

// The data rank goes silent from outside (SIGSTOP once training runs, against a 4 s deadline):
// the model ranks give up, name it, write their timelines, and the job ends. The offline report
// names rank 0 as the rank that never arrived. (A data rank that is only slow is not silent: its
// heartbeat goes on, and the run waits for it.)
TEST_F(ReportKnownAnswers, SilentDataRankIsNamedByTheOfflineReport) {
  const fs::path run_dir = test::scratch_dir("report-test", "hang");
  const auto stopped = test::interrupt_ranks(
      train_command(3, run_dir, "--set runtime.timeout_s=4 --set train.credits=1 --set train.log_every=1", 100000),
      run_dir, SIGSTOP, {0});
  ASSERT_GE(stopped.seconds, 0) << "the run did not start training:\n" << stopped.output;
  ASSERT_TRUE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) != 0) << stopped.output;
  ASSERT_TRUE(fs::exists(run_dir / "timeline" / "rank-1.json")) << stopped.output;
  ASSERT_TRUE(fs::exists(run_dir / "timeline" / "rank-2.json")) << stopped.output;
  const auto offline = test::run_command(std::string(SLUICE_BINARY) + " report " + run_dir.string());
  EXPECT_NE(offline.output.find("hang"), std::string::npos) << offline.output;
  const json report = read_json(run_dir / "report.json");
  const json hang = verdict(report, "hang");
  ASSERT_FALSE(hang.is_null()) << test::verdict_kinds(report);
  EXPECT_EQ(hang["rank"], 0) << hang;
  EXPECT_EQ(report["hang"]["culprit"], 0) << report["hang"];
}

}  // namespace
}  // namespace sluice
