// Every verdict rule of docs/report.md against synthetic timelines whose answer is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "report/prep_analysis.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"
#include "tests/report/synthetic_run.h"

namespace sluice::report {
namespace {

using testing::SyntheticTrain;
using testing::make_train_timelines;
using testing::find;


std::vector<std::string> kinds(const std::vector<StallVerdict>& verdicts) {
  std::vector<std::string> names;
  for (const auto& v : verdicts) names.push_back(std::string(to_string(v.kind)));
  return names;
}

// Compute 0.1 s per step (forward 0.04 + backward 0.05 + optimizer 0.01) plus a 1 ms all-reduce:
// a batch wait of w gives I/T = w / (w + 0.101).
double wait_for_fraction(double fraction) { return fraction * 0.101 / (1 - fraction); }

TEST(InputBound, HighAtThirtyPercentNamesCacheReadAndReaderThreads) {
  SyntheticTrain run;
  run.batch_wait = wait_for_fraction(0.30);
  const auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_TRUE(analysis.steady.enough);
  EXPECT_NEAR(analysis.input_wait_fraction, 0.30, 0.01);
  const auto verdicts = train_verdicts(analysis);
  const StallVerdict* v = find(verdicts, "input_bound");
  ASSERT_NE(v, nullptr) << kinds(verdicts).size();
  EXPECT_EQ(v->severity, Severity::high);
  EXPECT_NEAR(v->numbers["input_wait_fraction"].get<double>(), 0.30, 0.01);
  EXPECT_EQ(v->numbers["busiest_data_stage"], "cache_read");
  EXPECT_EQ(v->numbers["batches_queued"], false);
  EXPECT_NE(v->recommendation.find("train.reader_threads from 2"), std::string::npos) << v->recommendation;
  EXPECT_NE(v->recommendation.find("roles.data_per_node from 1"), std::string::npos) << v->recommendation;
  EXPECT_EQ(find(verdicts, "compute_bound"), nullptr);
}

TEST(InputBound, ModerateAtTenPercent) {
  SyntheticTrain run;
  run.batch_wait = wait_for_fraction(0.10);
  const auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_NEAR(analysis.input_wait_fraction, 0.10, 0.01);
  const auto verdicts = train_verdicts(analysis);  // kept: find() points into it
  const StallVerdict* v = find(verdicts, "input_bound");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->severity, Severity::moderate);
}

TEST(InputBound, QueuedBatchesPointAtTheFeedAndCredits) {
  SyntheticTrain run;
  run.batch_wait = wait_for_fraction(0.25);
  run.data_wait_stage = Stage::credit_wait;
  run.reader_busy_share = 0.1;
  run.queue_depth = 2;
  const StallVerdict* v = nullptr;
  const auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  v = find(verdicts, "input_bound");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->numbers["batches_queued"], true);
  EXPECT_NEAR(v->numbers["queue_depth_mean"].get<double>(), 2.0, 1e-9);
  EXPECT_NE(v->recommendation.find("train.credits from 3"), std::string::npos) << v->recommendation;
}

TEST(InputBound, ASlowSendIsExposedTransfer) {
  // One model rank: the batch_wait ends as its 30 ms send ends, so 30 ms of every wait is transfer.
  SyntheticTrain run;
  run.model_ranks = 1;
  run.batch_wait = 0.035;
  run.send_seconds = 0.031;
  run.data_wait_stage = Stage::credit_wait;
  run.reader_busy_share = 0.1;
  const auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_NEAR(analysis.transfer_exposed_fraction, 0.030 / 0.136, 0.01);
  const auto verdicts = train_verdicts(analysis);
  const StallVerdict* input = find(verdicts, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->numbers["busiest_data_stage"], "send");
  const StallVerdict* comm = find(verdicts, "communication_bound");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->severity, Severity::high);
  EXPECT_EQ(comm->numbers["exposed"], "transfer");
  EXPECT_NE(comm->recommendation.find("train.credits from 3"), std::string::npos) << comm->recommendation;
}

TEST(ComputeBound, NoWaitAndHiddenCommunication) {
  SyntheticTrain run;
  run.data_wait_stage = Stage::credit_wait;
  run.reader_busy_share = 0.1;
  run.queue_depth = 2;
  const auto analysis = analyze_train(make_train_timelines(run));
  const auto verdicts = train_verdicts(analysis);
  EXPECT_EQ(kinds(verdicts), std::vector<std::string>{"compute_bound"});
  EXPECT_LT(analysis.input_wait_fraction, 0.05);
  EXPECT_LT(analysis.allreduce_exposed_fraction, 0.03);
  EXPECT_GT(verdicts[0].numbers["busy_fraction"].get<double>(), 0.9);
}

TEST(CommunicationBound, HighAndModerateAllReduce) {
  SyntheticTrain run;
  run.allreduce = 0.030;  // 0.03 / 0.131 = 22.9%
  auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  const StallVerdict* v = find(verdicts, "communication_bound");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->severity, Severity::high);
  EXPECT_NEAR(v->numbers["allreduce_exposed_fraction"].get<double>(), 0.030 / 0.131, 0.01);
  EXPECT_EQ(v->numbers["exposed"], "allreduce");
  EXPECT_TRUE(v->numbers["baseline_bytes_per_s"].is_null());
  EXPECT_NE(v->summary.find("no baseline measured"), std::string::npos);
  EXPECT_EQ(find(verdicts, "compute_bound"), nullptr);

  run.allreduce = 0.006;  // 5.6%
  verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  v = find(verdicts, "communication_bound");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->severity, Severity::moderate);
}

TEST(CommunicationBound, BandwidthAgainstAMeasuredBaseline) {
  SyntheticTrain run;
  run.allreduce = 0.030;
  auto timelines = make_train_timelines(run);
  timelines[1].summary["allreduce_baseline_bytes_per_s"] = 1e9;
  const StallVerdict* v = nullptr;
  const auto verdicts = train_verdicts(analyze_train(timelines));
  v = find(verdicts, "communication_bound");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->numbers["baseline_bytes_per_s"].get<double>(), 1e9);
  // 4 MB per step over 31 ms of all-reduce on the two ranks that wait least.
  EXPECT_GT(v->numbers["achieved_bytes_per_s"].get<double>(), 0);
  // 4 MB per step take 4 ms at 1 GB/s; the exposed wait (30 ms per step) is far longer: skew or
  // progress, not bandwidth, and the verdict says so.
  EXPECT_NEAR(v->numbers["allreduce_baseline_seconds_per_step"].get<double>(),
              v->numbers["allreduce_bytes_per_step"].get<double>() / 1e9, 1e-12);
  EXPECT_GT(v->numbers["allreduce_exposed_seconds_per_step"].get<double>(),
            2 * v->numbers["allreduce_baseline_seconds_per_step"].get<double>());
  EXPECT_NE(v->summary.find("at the measured baseline 1.00 GB/s"), std::string::npos) << v->summary;
  EXPECT_NE(v->recommendation.find("wait for each other"), std::string::npos) << v->recommendation;
}

TEST(CommunicationBound, AWaitAsLongAsTheBytesTakeIsBandwidth) {
  SyntheticTrain run;
  run.allreduce = 0.030;
  auto timelines = make_train_timelines(run);
  timelines[1].summary["allreduce_baseline_bytes_per_s"] = 1e8;  // 4 MB take 40 ms: the wait is the transfer
  const auto verdicts = train_verdicts(analyze_train(timelines));
  const StallVerdict* v = find(verdicts, "communication_bound");
  ASSERT_NE(v, nullptr);
  EXPECT_LE(v->numbers["allreduce_exposed_seconds_per_step"].get<double>(),
            2 * v->numbers["allreduce_baseline_seconds_per_step"].get<double>());
  EXPECT_NE(v->recommendation.find("hide more of the all-reduce"), std::string::npos) << v->recommendation;
}

TEST(Straggler, NamesExactlyTheSlowModelRankWithItsCost) {
  SyntheticTrain run;
  run.model_ranks = 4;
  run.extra_forward = [](int rank, int64_t) { return rank == 3 ? 0.030 : 0.0; };
  const auto analysis = analyze_train(make_train_timelines(run));
  const auto verdicts = train_verdicts(analysis);
  std::vector<int> named;
  for (const auto& v : verdicts) {
    if (v.kind == VerdictKind::straggler) named.push_back(v.rank);
  }
  ASSERT_EQ(named, std::vector<int>{3});
  const StallVerdict* v = find(verdicts, "straggler");
  EXPECT_EQ(v->numbers["host"], "node3");
  EXPECT_EQ(v->numbers["gpu"], 2);
  EXPECT_EQ(v->numbers["measure"], "forward");
  EXPECT_NEAR(v->numbers["excess_seconds_per_step"].get<double>(), 0.030, 0.002);
  // Its cost: 30 ms on each of the 72 steady steps.
  EXPECT_EQ(v->numbers["steady_steps"], 72);
  EXPECT_NEAR(v->numbers["cost_seconds_steady"].get<double>(), 0.030 * 72, 0.1);
  EXPECT_NE(v->summary.find("rank 3 · node3 · GPU2 · model"), std::string::npos) << v->summary;
}

TEST(Straggler, TwoModelRanksStillNameTheSlowOne) {
  SyntheticTrain run;
  run.extra_forward = [](int rank, int64_t) { return rank == 1 ? 0.020 : 0.0; };
  const auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  std::vector<int> named;
  for (const auto& v : verdicts) {
    if (v.kind == VerdictKind::straggler) named.push_back(v.rank);
  }
  EXPECT_EQ(named, std::vector<int>{1});
}

TEST(Straggler, FoundByForwardWhenTheOthersWaitInsideBackward) {
  // As measured on 4 CPU ranks (runs/exp-c): rank 3 sleeps 300 ms in forward; the other ranks'
  // backward grows by as much, because their bucket reductions block there for rank 3, so the
  // forward+backward+optimizer sums are even and only forward tells.
  SyntheticTrain run;
  run.model_ranks = 3;
  run.extra_forward = [](int rank, int64_t) { return rank == 3 ? 0.300 : 0.0; };
  run.extra_backward = [](int rank, int64_t) { return rank == 3 ? 0.0 : 0.300; };
  const auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  std::vector<int> named;
  for (const auto& v : verdicts) {
    if (v.kind == VerdictKind::straggler) named.push_back(v.rank);
  }
  ASSERT_EQ(named, std::vector<int>{3});
  const StallVerdict* v = find(verdicts, "straggler");
  EXPECT_EQ(v->numbers["measure"], "forward");
  EXPECT_NEAR(v->numbers["excess_seconds_per_step"].get<double>(), 0.300, 0.002);
}

TEST(Straggler, ASlowOptimizerIsFoundByTheBusySum) {
  SyntheticTrain run;
  run.model_ranks = 3;
  run.optimizer = 0.010;
  run.extra_backward = [](int rank, int64_t step) { return rank == 2 ? 0.020 + 0.0001 * (step % 3) : 0.0; };
  const auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  const StallVerdict* v = find(verdicts, "straggler");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->rank, 2);
  EXPECT_EQ(v->numbers["measure"], "forward+backward+optimizer");
}

TEST(Straggler, NoneWhenRanksDifferOnlyByNoise) {
  SyntheticTrain run;
  run.model_ranks = 4;
  EXPECT_EQ(find(train_verdicts(analyze_train(make_train_timelines(run))), "straggler"), nullptr);
}

TEST(CyclicStall, PeriodSevenFromADelayEverySeventhBatch) {
  SyntheticTrain run;
  run.steps = 120;
  run.extra_wait = [](int64_t step) { return (step + 1) % 7 == 0 ? 0.080 : 0.0; };
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) t.injected_delay = {{"stage", "send"}, {"every", 7}, {"milliseconds", 80}};
  const auto verdicts = train_verdicts(analyze_train(timelines));
  const StallVerdict* v = find(verdicts, "cyclic_stall");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->numbers["period"], 7);
  EXPECT_GE(v->numbers["spikes"].get<int>(), 3);
  EXPECT_GE(v->numbers["gap_share"].get<double>(), 0.7);
  EXPECT_GT(v->numbers["autocorrelation"].get<double>(), v->numbers["autocorrelation_bound"].get<double>());
  EXPECT_NEAR(v->numbers["spike_excess_seconds"].get<double>(), 0.080, 0.003);
  EXPECT_EQ(v->numbers["grown_stage"], "batch_wait");
  EXPECT_NE(v->summary.find("debug.delay_every = 7"), std::string::npos) << v->summary;
}

TEST(CyclicStall, FoundInTheStageSeriesUnderATwoLevelStepTime) {
  // As measured on a CPU run (runs/exp-b): steps alternate between about 0.3 s and 0.65 s, so the
  // step time's MAD is wide and its threshold above the 1.5 s send delay every 7th batch; the
  // batch_wait series shows the period.
  SyntheticTrain run;
  run.steps = 120;
  std::mt19937 random(99);
  std::vector<double> slow(static_cast<size_t>(run.steps));
  for (auto& x : slow) x = random() % 2 ? 0.35 : 0.0;
  run.extra_backward = [slow](int, int64_t step) { return slow[static_cast<size_t>(step)]; };
  run.extra_wait = [](int64_t step) { return (step + 1) % 7 == 0 ? 0.5 : 0.0; };
  const auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  const StallVerdict* v = find(verdicts, "cyclic_stall");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->numbers["period"], 7);
  EXPECT_EQ(v->numbers["series"], "batch_wait");
}

TEST(CyclicStall, MatchesTheCheckpointInterval) {
  SyntheticTrain run;
  run.steps = 150;
  run.settings["train.checkpoint_every"] = 10;
  run.settings["train.log_every"] = 25;
  run.extra_forward = [](int, int64_t step) { return (step + 1) % 10 == 0 ? 0.050 : 0.0; };
  const StallVerdict* v = nullptr;
  const auto verdicts = train_verdicts(analyze_train(make_train_timelines(run)));
  v = find(verdicts, "cyclic_stall");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->numbers["period"], 10);
  EXPECT_NE(v->recommendation.find("train.checkpoint_every"), std::string::npos) << v->recommendation;
}

TEST(CyclicStall, NotFromRandomSpikes) {
  SyntheticTrain run;
  run.steps = 120;
  std::mt19937 random(1234);
  std::set<int64_t> spikes;
  while (spikes.size() < 9) spikes.insert(10 + static_cast<int64_t>(random() % 110));
  run.extra_wait = [spikes](int64_t step) { return spikes.count(step) ? 0.080 : 0.0; };
  const auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_EQ(find(train_verdicts(analysis), "cyclic_stall"), nullptr);
  // The detector saw the spikes and rejected the period.
  std::vector<double> series;
  std::vector<int64_t> steps;
  for (const auto& j : analysis.job_steps) {
    if (j.step >= analysis.steady.first_step) {
      steps.push_back(j.step);
      series.push_back(j.seconds);
    }
  }
  const CyclicStall c = find_cyclic_stall(series, steps, 0.005);
  EXPECT_GE(c.spike_steps.size(), 3u);
  EXPECT_FALSE(c.found);
}

TEST(SteadyState, FewerThanTwentySteadyStepsGiveNoVerdict) {
  SyntheticTrain run;
  run.steps = 24;  // 5 warm-up steps dropped, 19 left
  run.batch_wait = wait_for_fraction(0.30);
  auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_EQ(analysis.steady.steady_steps, 19u);
  EXPECT_FALSE(analysis.steady.enough);
  const auto verdicts = train_verdicts(analysis);
  ASSERT_EQ(kinds(verdicts), std::vector<std::string>{"no_verdict"});
  EXPECT_NE(verdicts[0].summary.find("only 19 steady steps"), std::string::npos) << verdicts[0].summary;

  run.steps = 25;  // 20 steady steps: enough
  analysis = analyze_train(make_train_timelines(run));
  EXPECT_TRUE(analysis.steady.enough);
  EXPECT_NE(find(train_verdicts(analysis), "input_bound"), nullptr);
}

TEST(SteadyState, WarmUpIsDropped) {
  SyntheticTrain run;
  run.steps = 200;  // 10% = 20 warm-up steps; the first 5 are slow
  const auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_EQ(analysis.steady.warmup_steps, 20u);
  EXPECT_EQ(analysis.steady.first_step, 20);
  EXPECT_LT(analysis.role_step_seconds.p99, 0.2);  // the 1 s warm-up steps are not in it
}

TEST(Hang, NamesTheRankThatWroteNoTimeline) {
  SyntheticTrain run;
  run.model_ranks = 3;
  auto timelines = make_train_timelines(run);
  timelines[1].status = "failed";
  timelines[1].waiting_for = 3;
  timelines[1].error = "gradient all-reduce timed out";
  timelines[2].status = "failed";
  timelines[2].waiting_for = 3;
  timelines[0].status = "failed";
  timelines[0].waiting_for = 1;
  timelines.erase(timelines.begin() + 3);  // rank 3 died
  const auto analysis = analyze_train(timelines);
  EXPECT_TRUE(analysis.hang.any);
  EXPECT_EQ(analysis.hang.missing_ranks, std::vector<int>{3});
  EXPECT_EQ(analysis.hang.culprit, 3);
  const auto verdicts = train_verdicts(analysis);
  ASSERT_FALSE(verdicts.empty());
  EXPECT_EQ(verdicts[0].kind, VerdictKind::hang);
  EXPECT_EQ(verdicts[0].rank, 3);
  EXPECT_NE(verdicts[0].summary.find("rank 3 wrote no timeline"), std::string::npos) << verdicts[0].summary;
  EXPECT_NE(verdicts[0].summary.find("ranks waiting for it: 1, 2"), std::string::npos) << verdicts[0].summary;
}

TEST(Hang, FollowsTheWaitingChainAndComparesChannels) {
  SyntheticTrain run;
  auto timelines = make_train_timelines(run);
  // Rank 1 waits for its batch from rank 0; rank 2 waits in the all-reduce for rank 1; rank 0
  // failed on its own (a cache read error) after sending 40 of rank 1's batches.
  timelines[0].status = "failed";
  timelines[0].error = "shard-00003.h5: checksum mismatch";
  timelines[0].channels[0]["batches"] = 40;
  timelines[1].status = "failed";
  timelines[1].waiting_for = 0;
  timelines[1].channels[0]["batches"] = 39;
  timelines[2].status = "failed";
  timelines[2].waiting_for = 1;
  const auto analysis = analyze_train(timelines);
  EXPECT_EQ(analysis.hang.culprit, 0);
  ASSERT_EQ(analysis.hang.channel_mismatches.size(), 1u);
  EXPECT_EQ(analysis.hang.channel_mismatches[0], "rank 0 sent 40 batches to rank 1, which received 39");
  EXPECT_EQ(analysis.hang.ranks[1].last_step, run.steps - 1);
  EXPECT_NE(analysis.hang.culprit_reason.find("checksum mismatch"), std::string::npos);
}

TEST(Clock, SkewIsUndoneByAlignmentAndCaughtWithoutIt) {
  SyntheticTrain run;
  run.skew_ns = {0, -5'000'000'000, 3'000'000'000};  // rank 1's clock 5 s behind, rank 2's 3 s ahead
  auto analysis = analyze_train(make_train_timelines(run));
  EXPECT_EQ(analysis.clock.causality.pairs_checked, 2 * run.steps);
  EXPECT_EQ(analysis.clock.causality.violations, 0);
  EXPECT_EQ(analysis.clock.causality.violations_unaligned, run.steps);  // every batch of rank 1
  EXPECT_EQ(analysis.clock.max_uncertainty_ns, 20'000);
  // The same skew with a broken alignment (offsets not recorded): the check counts it.
  run.record_offsets = false;
  analysis = analyze_train(make_train_timelines(run));
  EXPECT_EQ(analysis.clock.causality.violations, run.steps);
  EXPECT_NE(analysis.clock.causality.example.find("rank 1 received batch"), std::string::npos);
}

TEST(Prep, NamesTheSlowPrepRankAndCountsRejects) {
  const auto timelines = testing::make_prep_timelines(3, 60, [](int rank) { return rank == 2 ? 2.0 : 1.0; });
  const nlohmann::json prep_report = {
      {"corpus_rows", 185},
      {"rejects", 5},
      {"reject_reasons", {{"too_long", 3}, {"unreadable_audio", 2}}},
      {"ranks", {{{"rank", 0}, {"audio_seconds", 300.0}, {"rejects", 1}},
                 {{"rank", 1}, {"audio_seconds", 310.0}, {"rejects", 2}},
                 {{"rank", 2}, {"audio_seconds", 290.0}, {"rejects", 2}}}}};
  const auto analysis = analyze_prep(timelines, prep_report);
  ASSERT_EQ(analysis.ranks.size(), 3u);
  EXPECT_EQ(analysis.ranks[0].rows, 60);
  // 60 rows in 60 x 11 ms.
  EXPECT_NEAR(analysis.ranks[0].rows_per_second, 60 / (60 * 0.011), 5);
  EXPECT_NEAR(analysis.ranks[0].audio_seconds_per_second, 300 / (60 * 0.011), 30);
  std::vector<int> named;
  for (const auto& v : analysis.verdicts) {
    if (v.kind == VerdictKind::straggler) named.push_back(v.rank);
  }
  EXPECT_EQ(named, std::vector<int>{2});
  EXPECT_EQ(analysis.reject_reasons.at("too_long"), 3);
  EXPECT_EQ(analysis.rejects, 5);
}

TEST(Prep, BalancedRanksGiveNoStraggler) {
  const auto analysis = analyze_prep(testing::make_prep_timelines(3, 60, [](int) { return 1.0; }), nullptr);
  ASSERT_EQ(analysis.verdicts.size(), 1u);
  EXPECT_EQ(analysis.verdicts[0].kind, VerdictKind::balanced);
}

// prep-report.json's entry for one rank's builder: `write` seconds of its writer's `wall`, the
// workers' busy seconds and the writer's CPU seconds, 8 MB of mels.
nlohmann::json builder_entry(int rank, int workers, double wall, double write, double worker_busy, double writer_cpu) {
  return {{"rank", rank},
          {"audio_seconds", 100.0},
          {"rejects", 0},
          {"workers", workers},
          {"wall_seconds", wall},
          {"stages", {{"decode", 0.2 * worker_busy}, {"text", 0.0}, {"features", 0.8 * worker_busy}, {"write", write}}},
          {"cpu_seconds", {{"workers", worker_busy}, {"writer", writer_cpu}}},
          {"mel_bytes", 8'000'000}};
}

const StallVerdict* find_kind(const PrepAnalysis& analysis, VerdictKind kind) {
  for (const auto& v : analysis.verdicts) {
    if (v.kind == kind) return &v;
  }
  return nullptr;
}

// The write_bound rule: a writer busy >= 80% of its rank's wall time while the workers are busy
// <= 60% of theirs. Its CPU time against its busy time tells waiting for storage from running out
// of CPU; the worst rank is named and the others counted.
TEST(Prep, AWriterBusyWhileTheWorkersWaitIsWriteBound) {
  const auto timelines = testing::make_prep_timelines(3, 60, [](int) { return 1.0; });
  // Ranks 0 and 2 wait for storage (writer on the CPU for 5% of its time); rank 2's workers are the
  // idler (10% busy); rank 1 is healthy (writer 25% busy, workers 95%).
  const nlohmann::json storage = {{"ranks",
                                   {builder_entry(0, 4, 10.0, 9.5, 0.4 * 4 * 10.0, 0.5),
                                    builder_entry(1, 4, 10.0, 2.5, 0.95 * 4 * 10.0, 2.0),
                                    builder_entry(2, 4, 10.0, 9.8, 0.1 * 4 * 10.0, 0.4)}}};
  auto analysis = analyze_prep(timelines, storage);
  const StallVerdict* v = find_kind(analysis, VerdictKind::write_bound);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->rank, 2);
  EXPECT_EQ(v->severity, Severity::high);  // workers busy 10% <= 30%
  EXPECT_EQ(v->numbers["cause"], "storage");
  EXPECT_EQ(v->numbers["write_bound_ranks"], 2);
  EXPECT_NEAR(v->numbers["write_bytes_per_s"].get<double>(), 8e6 / 9.8, 1);
  EXPECT_NEAR(v->numbers["write_bytes_per_s_together"].get<double>(), 8e6 / 9.8 + 8e6 / 9.5, 1);
  EXPECT_NE(v->summary.find("waited for the cache's storage"), std::string::npos) << v->summary;
  EXPECT_NE(v->summary.find("2 of the 3 prep ranks alike"), std::string::npos) << v->summary;
  EXPECT_NE(v->recommendation.find("faster storage"), std::string::npos) << v->recommendation;
  EXPECT_EQ(find_kind(analysis, VerdictKind::balanced), nullptr);

  // The writer on the CPU for 90% of its busy time: out of CPU for its workers, MODERATE at 50%.
  const nlohmann::json cpu = {{"ranks", {builder_entry(0, 8, 10.0, 9.0, 0.5 * 8 * 10.0, 8.1)}}};
  analysis = analyze_prep(testing::make_prep_timelines(1, 60, [](int) { return 1.0; }), cpu);
  v = find_kind(analysis, VerdictKind::write_bound);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->severity, Severity::moderate);
  EXPECT_EQ(v->numbers["cause"], "writer_cpu");
  EXPECT_NE(v->recommendation.find("more prep ranks per node"), std::string::npos) << v->recommendation;

  // Not write-bound: the workers busy (both at their limit), the writer under 80%, a rank under a
  // second, or an older prep-report.json without the counts.
  for (const auto& entry : {builder_entry(0, 4, 10.0, 9.5, 0.7 * 4 * 10.0, 0.5),
                            builder_entry(0, 4, 10.0, 7.5, 0.1 * 4 * 10.0, 0.5),
                            builder_entry(0, 4, 0.9, 0.89, 0.0, 0.01),
                            builder_entry(0, 0, 10.0, 9.5, 0.0, 0.5)}) {
    analysis = analyze_prep(testing::make_prep_timelines(1, 60, [](int) { return 1.0; }), {{"ranks", {entry}}});
    EXPECT_EQ(find_kind(analysis, VerdictKind::write_bound), nullptr) << entry.dump();
  }
}

TEST(RobustStats, PercentilesAndModifiedZ) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 50), 3);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 100), 5);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 95), 9.5);
  EXPECT_DOUBLE_EQ(median_absolute_deviation({1, 2, 3, 4, 100}, 3), 1);
  EXPECT_NEAR(modified_z(100, 3, 1), 0.6745 * 97, 1e-9);
  std::vector<double> periodic;
  for (int i = 0; i < 70; ++i) periodic.push_back(i % 7 == 0 ? 1.0 : 0.0);
  EXPECT_GT(autocorrelation(periodic, 7), 0.8);
  EXPECT_LT(autocorrelation(periodic, 3), 0.0);
}

// Distribution::of finds its percentiles by partitioning; they must be exactly those of a sorted
// copy, ties and odd sizes included. LeaveOutSample must give exactly the median of a copy without
// the member's values (the straggler and descheduled rules compare against it).
TEST(RobustStats, PartitionedPercentilesAndLeaveOutMediansEqualTheSortedCopies) {
  std::mt19937_64 random(7);
  for (size_t n : {1u, 2u, 3u, 10u, 99u, 100u, 101u, 1000u}) {
    std::vector<double> values(n);
    std::uniform_int_distribution<int> level(0, 20);  // many ties
    for (auto& v : values) v = 0.001 * level(random) + (random() % 3 == 0 ? 0.0 : 1e-7 * static_cast<double>(random() % 1000));
    const Distribution d = Distribution::of(values);
    EXPECT_EQ(d.p50, percentile(values, 50)) << n;
    EXPECT_EQ(d.p95, percentile(values, 95)) << n;
    EXPECT_EQ(d.p99, percentile(values, 99)) << n;
    EXPECT_EQ(d.max, *std::max_element(values.begin(), values.end())) << n;
    if (n < 2) continue;
    const LeaveOutSample pool(values);
    for (size_t i = 0; i < std::min<size_t>(n, 20); ++i) {
      std::vector<double> others = values;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      EXPECT_EQ(pool.median_without({values[i]}), median(others)) << n << " without " << i;
    }
  }
}

// The step-straggler rule takes one value per rank and step; a pair given twice counts once, the
// last one given, and the order of the rows does not matter.
TEST(Straggler, StepRowsInAnyOrderTheLastOfAPairCounting) {
  std::vector<RankStepValue> rows;
  for (int64_t step = 0; step < 40; ++step) {
    for (int rank = 0; rank < 4; ++rank) rows.push_back({rank, step, 0.1 + 0.001 * static_cast<double>((step * 7 + rank) % 5)});
  }
  const auto base = find_step_stragglers(rows, 0.2);
  EXPECT_TRUE(base.empty());
  // Rank 3 slow in every step, given after a first, fast value for each step; rows shuffled.
  for (int64_t step = 0; step < 40; ++step) rows.push_back({3, step, 0.3});
  std::vector<RankStepValue> shuffled = rows;
  std::shuffle(shuffled.begin(), shuffled.end() - 40, std::mt19937_64(3));
  for (const auto& findings : {find_step_stragglers(rows, 0.2), find_step_stragglers(shuffled, 0.2)}) {
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].rank, 3);
    EXPECT_EQ(findings[0].items, 40u);
    EXPECT_DOUBLE_EQ(findings[0].rank_median, 0.3);
  }
}

}  // namespace
}  // namespace sluice::report

namespace sluice::report {
namespace {

// restarts.json as `sluice supervise` writes it (supervisor/supervisor.h), with `n` restarts.
nlohmann::json restarts_record(int n, const std::string& outcome) {
  nlohmann::json record = {{"format", "sluice-restarts/1"}, {"max_restarts", 100}, {"outcome", outcome},
                           {"message", outcome == "too_few_ranks" ? "the next round would have 0 model rank(s)" : ""},
                           {"restarts", nlohmann::json::array()}, {"left_out", nlohmann::json::array()}};
  for (int i = 0; i < n; ++i) {
    record["restarts"].push_back({{"after_round", i + 1},
                                  {"fault", {{"kind", i % 2 ? "silent" : "killed"}, {"rank", i}, {"host", "h" + std::to_string(i)},
                                             {"signal", 9}, {"silent_s", 5.0}}},
                                  {"lost_s", 2.0 + i},
                                  {"resumed_from_step", 10 * i},
                                  {"failed_round_last_step", 10 * i + 3},
                                  {"first_step_again", 10 * i + 1}});
  }
  return record;
}

TEST(RestartVerdict, SaysHowOftenWhyAndTheTimeLostBoundedToFiveFaults) {
  EXPECT_FALSE(restart_verdict(nullptr));
  EXPECT_FALSE(restart_verdict(restarts_record(0, "finished")));
  const auto v = restart_verdict(restarts_record(7, "running"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->kind, VerdictKind::restarts);
  EXPECT_EQ(v->severity, Severity::moderate);
  EXPECT_DOUBLE_EQ(v->numbers["lost_s"].get<double>(), 2 + 3 + 4 + 5 + 6 + 7 + 8);
  EXPECT_DOUBLE_EQ(v->numbers["longest_lost_s"].get<double>(), 8);
  EXPECT_NE(v->summary.find("rank 0 (host h0) killed by signal 9 in round 1"), std::string::npos) << v->summary;
  EXPECT_NE(v->summary.find("rank 1 (host h1) silent for 5.0 s in round 2"), std::string::npos) << v->summary;
  EXPECT_EQ(v->summary.find("h5"), std::string::npos) << "five faults named, the rest counted: " << v->summary;
  EXPECT_NE(v->summary.find("and 2 more"), std::string::npos) << v->summary;
}

TEST(RestartVerdict, IsHighWhenTheSupervisorGaveUp) {
  const auto v = restart_verdict(restarts_record(1, "too_few_ranks"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->severity, Severity::high);
  EXPECT_NE(v->summary.find("the supervisor stopped: the next round would have 0 model rank(s)"), std::string::npos)
      << v->summary;
}

}  // namespace
}  // namespace sluice::report
