// The report of a long run (report/run_analysis.h, "LONG RUNS"): what the analysis keeps per rank,
// and report.json's size, are the same for 1,000 and 4,000 steps; the verdicts still name what
// was planted; a period longer than the analysed window is still found over every step; the
// stall intervals kept near a capped rank's window give the numbers every interval gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "report/report_documents.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"
#include "report/write_report.h"
#include "tests/report/synthetic_run.h"

namespace sluice::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path write_run(const std::string& name, const std::vector<timing::RankTimeline>& timelines) {
  const fs::path dir = fs::path(SLUICE_REPORT_TEST_DIR) / name;
  fs::remove_all(dir);
  for (const auto& t : timelines) timing::write_timeline(dir, t);
  return dir;
}

testing::SyntheticTrain long_run(int steps) {
  testing::SyntheticTrain run;
  run.steps = steps;
  run.batch_wait = 0.02;  // 15% input wait: input-bound MODERATE
  return run;
}

// Every rank measured, with a 2 ms stall in every step (at the start of each of its batch waits on
// a model rank, of each send on the data rank): the numbers of a rank's window are known from the
// full list of intervals.
void add_stalls(std::vector<timing::RankTimeline>& timelines) {
  for (auto& t : timelines) {
    t.resources = {{"wall_seconds", 1000.0}, {"cpu_user_seconds", 10.0}, {"cpu_system_seconds", 1.0},
                   {"cpu_cores_mean", 0.9},  {"stalls_dropped", 0},      {"stalled_seconds", 0.0},
                   {"stall_count", 0}};
    const timing::Stage marker = t.role == "data" ? timing::Stage::send : timing::Stage::batch_wait;
    for (const auto& s : t.spans) {
      if (s.stage == marker) t.stalls.emplace_back(s.start_ns + 100'000, s.start_ns + 2'100'000);
    }
  }
}

// The stall numbers over [start, end] from every interval, as analyze_rank_cpu clips them.
std::pair<int64_t, double> stalls_in(const timing::RankTimeline& t, int64_t start, int64_t end) {
  int64_t count = 0;
  double seconds = 0;
  for (const auto& [a, b] : t.stalls) {
    const int64_t from = std::max(a, start), to = std::min(b, end);
    if (to <= from) continue;
    ++count;
    seconds += static_cast<double>(to - from) * 1e-9;
  }
  return {count, seconds};
}

TEST(LongRuns, TheAnalysisKeepsTheSameRecordsForAThousandAndFourThousandSteps) {
  struct Kept {
    size_t steps_per_rank = 0, left_out = 0, job_steps = 0, batches_judged = 0, data_batches = 0;
    int64_t causality_pairs = 0;
    uintmax_t json_bytes = 0;
  };
  std::map<int, Kept> kept;
  for (int steps : {1000, 4000}) {
    const auto timelines = testing::make_train_timelines(long_run(steps));
    const TrainAnalysis a = analyze_train(timelines);
    ASSERT_EQ(a.model_ranks.size(), 2u);
    EXPECT_TRUE(a.steady.capped);
    EXPECT_EQ(a.steady.steady_steps, max_analysed_steps);
    Kept& k = kept[steps];
    for (const auto& m : a.model_ranks) {
      EXPECT_TRUE(m.capped);
      EXPECT_EQ(m.recorded_steps, static_cast<size_t>(steps));
      EXPECT_EQ(m.steps.size(), max_analysed_steps) << "only the analysed window is kept";
      EXPECT_EQ(m.steps.back().step, steps - 1) << "the last steps";
      EXPECT_EQ(m.warmup_steps, static_cast<size_t>(steps / 10));
      EXPECT_EQ(m.left_out_steps, steps - steps / 10 - max_analysed_steps);
      k.steps_per_rank = m.steps.size();
    }
    EXPECT_EQ(a.steady.first_step, steps - static_cast<int64_t>(max_analysed_steps));
    EXPECT_EQ(a.steady.last_step, steps - 1);
    EXPECT_EQ(a.steady.recorded_first_step, steps / 10);
    EXPECT_EQ(a.job_steps.size(), static_cast<size_t>(steps)) << "the job's series holds every step, once";
    EXPECT_EQ(a.whole_run.steady_steps, 2u * static_cast<size_t>(steps - steps / 10));
    EXPECT_NEAR(a.whole_run.fraction(Stage::batch_wait), a.input_wait_fraction, 0.01);
    ASSERT_EQ(a.data_ranks.size(), 1u);
    k.data_batches = a.data_ranks[0].batch_busy_seconds.size();
    k.causality_pairs = a.clock.causality.pairs_checked;
    // The receives of the window and of the one step before it.
    EXPECT_EQ(k.causality_pairs, 2 * static_cast<int64_t>(max_analysed_steps + 1));
    EXPECT_EQ(a.clock.causality.violations, 0);
    k.left_out = a.steady.left_out_steps;

    const fs::path dir = write_run("long-" + std::to_string(steps), timelines);
    write_train_report(dir);
    const json report = json::parse(read_file(dir / "report.json"));
    for (const auto& m : report["model_ranks"]) {
      EXPECT_EQ(m["steps"], steps);
      EXPECT_EQ(m["step_series"].size(), max_analysed_steps);
    }
    EXPECT_EQ(report["analysis_window"]["capped"], true);
    EXPECT_EQ(report["analysis_window"]["max_steps"], max_analysed_steps);
    EXPECT_EQ(report["analysis_window"]["left_out_steps"], k.left_out);
    EXPECT_EQ(report["analysis_window"]["whole_run"]["steady_steps"], a.whole_run.steady_steps);
    EXPECT_NE(read_file(dir / "report.md").find("Long run: the numbers and verdicts cover each model rank's last 500"),
              std::string::npos);
    k.json_bytes = fs::file_size(dir / "report.json");
  }
  EXPECT_EQ(kept[1000].steps_per_rank, kept[4000].steps_per_rank);
  EXPECT_EQ(kept[1000].data_batches, kept[4000].data_batches);
  EXPECT_EQ(kept[1000].causality_pairs, kept[4000].causality_pairs);
  // report.json: the same records; only the step numbers have a digit more.
  EXPECT_NEAR(static_cast<double>(kept[4000].json_bytes), static_cast<double>(kept[1000].json_bytes),
              0.02 * static_cast<double>(kept[1000].json_bytes));
}

TEST(LongRuns, AShortRunIsAnalysedWhole) {
  // 556 steps: 56 warm-up and 500 steady steps, the most that are analysed whole.
  const TrainAnalysis a = analyze_train(testing::make_train_timelines(long_run(556)));
  EXPECT_FALSE(a.steady.capped);
  for (const auto& m : a.model_ranks) {
    EXPECT_EQ(m.steps.size(), 556u);
    EXPECT_EQ(m.steady_steps, max_analysed_steps);
    EXPECT_EQ(m.left_out_steps, 0u);
  }
  EXPECT_EQ(a.clock.causality.pairs_checked, 2 * 556);
  const TrainAnalysis b = analyze_train(testing::make_train_timelines(long_run(557)));
  EXPECT_TRUE(b.steady.capped);
  EXPECT_EQ(b.steady.left_out_steps, 1u);
}

// Above 4,096 ranks the window shrinks so that every rank's analysed steps together stay within
// the budget: a 300-step run of a 16,384-rank job is analysed over each rank's last 128 steps.
TEST(LongRuns, AJobOfManyRanksAnalysesAShorterWindow) {
  EXPECT_EQ(analysed_steps_for(3), max_analysed_steps);
  EXPECT_EQ(analysed_steps_for(4096), max_analysed_steps);
  EXPECT_EQ(analysed_steps_for(8192), 256u);
  EXPECT_EQ(analysed_steps_for(16384), 128u);
  EXPECT_EQ(analysed_steps_for(1 << 22), min_analysed_steps);
  auto timelines = testing::make_train_timelines(long_run(300));
  for (auto& t : timelines) t.world_size = 16384;
  const TrainAnalysis a = analyze_train(timelines);
  EXPECT_EQ(a.steady.max_steps, 128u);
  EXPECT_TRUE(a.steady.capped);
  for (const auto& m : a.model_ranks) {
    EXPECT_EQ(m.steps.size(), 128u);
    EXPECT_EQ(m.steady_steps, 128u);
    EXPECT_EQ(m.left_out_steps, 300u - 30u - 128u);  // 30 warm-up steps (10%)
  }
  EXPECT_EQ(a.steady.first_step, 300 - 128);
}

TEST(LongRuns, VerdictsOfALongRunNameWhatWasPlanted) {
  testing::SyntheticTrain run = long_run(3000);
  run.noise = 0.002;
  // A straggler (rank 2's forward +30 ms) and a stall every 250 steps: a period the 500-step
  // window holds only twice, the whole run ten times.
  run.extra_forward = [](int rank, int64_t) { return rank == 2 ? 0.030 : 0.0; };
  run.extra_wait = [](int64_t step) { return step % 250 == 7 ? 0.4 : 0.0; };
  run.settings["train.checkpoint_every"] = 250;
  const TrainAnalysis a = analyze_train(testing::make_train_timelines(run));
  ASSERT_TRUE(a.steady.capped);
  const auto verdicts = train_verdicts(a);
  const StallVerdict* straggler = testing::find(verdicts, "straggler");
  ASSERT_NE(straggler, nullptr) << verdict_lines(verdicts);
  EXPECT_EQ(straggler->rank, 2);
  EXPECT_EQ(straggler->numbers["steady_steps"], max_analysed_steps);
  // Its cost over the whole run: the excess per step times every step recorded.
  EXPECT_NEAR(straggler->numbers["cost_seconds_projected"].get<double>(), 0.030 * 3000, 0.030 * 3000 * 0.1);
  const StallVerdict* cyclic = testing::find(verdicts, "cyclic_stall");
  ASSERT_NE(cyclic, nullptr) << verdict_lines(verdicts);
  EXPECT_EQ(cyclic->numbers["period"], 250);
  EXPECT_EQ(cyclic->numbers["grown_stage"], "batch_wait");
  EXPECT_GE(cyclic->numbers["spikes"].get<size_t>(), 10u);
  EXPECT_NE(cyclic->recommendation.find("checkpoint"), std::string::npos) << cyclic->recommendation;
  EXPECT_NE(testing::find(verdicts, "input_bound"), nullptr) << verdict_lines(verdicts);
}

TEST(LongRuns, StallsKeptNearACappedRanksWindowGiveTheNumbersOfEveryStall) {
  auto timelines = testing::make_train_timelines(long_run(2000));
  add_stalls(timelines);
  const TrainAnalysis a = analyze_train(timelines);
  ASSERT_TRUE(a.steady.capped);
  ASSERT_TRUE(a.steady.enough);
  ASSERT_EQ(a.cpu.size(), 3u);
  for (const auto& t : timelines) {
    const auto [count, seconds] = stalls_in(t, a.steady.start_ns, a.steady.end_ns);
    const RankCpu* cpu = a.cpu_of(t.rank);
    ASSERT_NE(cpu, nullptr) << t.rank;
    EXPECT_EQ(cpu->stalls, count) << "rank " << t.rank;
    EXPECT_NEAR(cpu->stalled_seconds, seconds, 1e-9) << "rank " << t.rank;
    // A stall per step on a model rank, per batch (two a step) on the data rank.
    const double per_step = t.role == "data" ? 2 : 1;
    EXPECT_NEAR(static_cast<double>(count), per_step * static_cast<double>(max_analysed_steps), 2 * per_step);
  }
}

}  // namespace
}  // namespace sluice::report
