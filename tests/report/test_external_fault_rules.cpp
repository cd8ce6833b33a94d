// The rules for faults made outside the process (docs/report.md: Descheduled, the ratio straggler
// rule, a prep stopped on purpose, padding), on synthetic timelines whose answer is known. The
// same faults made for real (SIGSTOP, a cgroup CPU quota, a bad corpus) are in
// tests/runtime/test_report_external_faults.cpp.
#include <gtest/gtest.h>
#include <spdlog/fmt/fmt.h>

#include "common/error.h"
#include "report/html_report.h"
#include "report/prep_analysis.h"
#include "report/report_documents.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"
#include "tests/report/synthetic_run.h"

namespace sluice::report {
namespace {

using nlohmann::json;
using testing::SyntheticTrain;
using testing::make_train_timelines;
using testing::find;
using testing::resources_stopped;
using testing::set_storage_reads;
using testing::storage_reads;


std::string all_text(const std::vector<StallVerdict>& verdicts) {
  std::string text;
  for (const auto& v : verdicts) text += v.headline() + " -> " + v.recommendation + "\n";
  return text;
}

// Data rank 0 stopped 150 ms of every 200 ms: its batches are late and queue behind credits, so
// the spans alone say "the feed is the limit, raise train.credits". The OS's view names the rank.
TEST(Descheduled, StoppedDataRankIsNamedInsteadOfTheFeed) {
  SyntheticTrain run;
  run.batch_wait = 0.08;  // I/T about 44%
  run.data_wait_stage = Stage::credit_wait;
  run.reader_busy_share = 0.1;
  run.queue_depth = 2;
  auto timelines = make_train_timelines(run);
  {
    // Without the OS's view: the old advice, which the fault makes wrong.
    const auto verdicts = train_verdicts(analyze_train(timelines));
    ASSERT_NE(find(verdicts, "input_bound"), nullptr);
    EXPECT_NE(find(verdicts, "input_bound")->recommendation.find("train.credits"), std::string::npos);
    EXPECT_EQ(find(verdicts, "descheduled"), nullptr);
  }
  for (auto& t : timelines) t.set_resources(resources_stopped(t, t.rank == 0 ? 150 : 0, 200));
  const auto analysis = analyze_train(timelines);
  const auto verdicts = train_verdicts(analysis);
  const StallVerdict* d = find(verdicts, "descheduled");
  ASSERT_NE(d, nullptr) << all_text(verdicts);
  EXPECT_EQ(d->rank, 0);
  EXPECT_EQ(d->severity, Severity::high);
  EXPECT_EQ(d->numbers["cause"], "stopped_or_starved");
  EXPECT_NEAR(d->numbers["ran_fraction"].get<double>(), 0.25, 0.03);
  EXPECT_NE(d->summary.find("rank 0 ran 2"), std::string::npos) << d->summary;
  EXPECT_NE(d->summary.find("starved of CPU or stopped"), std::string::npos) << d->summary;
  EXPECT_NE(d->recommendation.find("model ranks (1, 2)"), std::string::npos) << d->recommendation;
  const StallVerdict* input = find(verdicts, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->numbers["descheduled_rank"], 0);
  EXPECT_EQ(input->recommendation.find("Raise train.credits"), std::string::npos) << input->recommendation;
  EXPECT_NE(input->recommendation.find("not running"), std::string::npos) << input->recommendation;
  // HIGH verdicts: descheduled right after hang, before input-bound.
  EXPECT_LT(d - verdicts.data(), input - verdicts.data());
}

// Every rank starved alike (an oversubscribed machine) is no one rank's fault.
TEST(Descheduled, RanksStarvedAlikeNameNoRank) {
  SyntheticTrain run;
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) t.set_resources(resources_stopped(t, 100, 200));
  const auto analysis = analyze_train(timelines);
  EXPECT_EQ(find(train_verdicts(analysis), "descheduled"), nullptr);
  for (const auto& c : analysis.cpu) EXPECT_NEAR(c.ran_fraction, 0.5, 0.03) << c.name;
}

// A model rank under a CPU quota: its busy time is about 8x the other's and very noisy (throttled
// in 100 ms periods), so the modified z rule, whose scale with two ranks is its own noise
// mirrored, misses it; the ratio rule names it with its cost, and the all-reduce verdict points
// at a straggler that is there.
TEST(Straggler, NoisyRankUnderACpuQuotaIsNamedByTheRatioRule) {
  SyntheticTrain run;
  run.steps = 60;
  run.extra_forward = [](int rank, int64_t step) {
    if (rank != 2) return 0.0;
    return 0.16 + 0.3 * static_cast<double>((step * 7919) % 101) / 100.0;  // 0.16..0.46 s, spread evenly
  };
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) {
    t.summary["allreduce_baseline_bytes_per_s"] = 1e9;
    t.set_resources(resources_stopped(t, t.rank == 2 ? 80 : 0, 100));
    if (t.rank == 2) {
      t.resources["cgroup"] = {{"path", "/sys/fs/cgroup/x"}, {"quota_cores", 0.2}, {"throttled_seconds", 30.0},
                               {"throttled_periods", 300}};
    }
  }
  const auto analysis = analyze_train(timelines);
  const auto verdicts = train_verdicts(analysis);
  const StallVerdict* s = find(verdicts, "straggler");
  ASSERT_NE(s, nullptr) << all_text(verdicts);
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->numbers["rule"], "ratio");
  EXPECT_GT(s->numbers["cost_seconds_steady"].get<double>(), 10.0);
  EXPECT_NEAR(s->numbers["excess_seconds_per_step"].get<double>(), 0.31, 0.03);
  const StallVerdict* d = find(verdicts, "descheduled");
  ASSERT_NE(d, nullptr) << all_text(verdicts);
  EXPECT_EQ(d->rank, 2);
  EXPECT_EQ(d->numbers["cause"], "cpu_quota");
  EXPECT_NE(d->summary.find("rank 2 was held to 0.20 cores by its cgroup's CPU quota"), std::string::npos)
      << d->summary;
  const StallVerdict* comm = find(verdicts, "communication_bound");
  ASSERT_NE(comm, nullptr) << all_text(verdicts);
  EXPECT_NE(comm->recommendation.find("rank 2"), std::string::npos) << comm->recommendation;
}

// As measured with a real quota of 0.2 cores (cgroup v1): the watch saw stalls in only 23% of the
// window (it is late only when it wakes inside a throttled period), but the rank used its whole
// quota and its group was throttled 37% of the time. The quota rule names it.
TEST(Descheduled, ARankUsingItsWholeQuotaIsHeldByIt) {
  SyntheticTrain run;
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) t.set_resources(resources_stopped(t, t.rank == 2 ? 23 : 5, 100));
  auto& held = timelines[2].resources;
  held["cpu_cores_mean"] = 0.204;
  held["cgroup"] = {{"path", "/sys/fs/cgroup/cpu/q"}, {"quota_cores", 0.2}, {"throttled_periods", 809},
                    {"throttled_seconds", 0.37 * held["wall_seconds"].get<double>()}};
  const auto analysis = analyze_train(timelines);
  const auto verdicts = train_verdicts(analysis);
  const StallVerdict* d = find(verdicts, "descheduled");
  ASSERT_NE(d, nullptr) << all_text(verdicts);
  EXPECT_EQ(d->rank, 2);
  EXPECT_EQ(d->numbers["cause"], "cpu_quota");
  EXPECT_NEAR(d->numbers["throttled_share"].get<double>(), 0.37, 1e-9);
  // The same rank under a quota it does not use up is not held by it.
  held["cpu_cores_mean"] = 0.05;
  EXPECT_EQ(find(train_verdicts(analyze_train(timelines)), "descheduled"), nullptr);
}

// A verdict never points at a verdict that is not there: an all-reduce wait without a straggler.
TEST(CommunicationBound, WaitBeyondTheBaselineWithoutStragglerNamesNone) {
  SyntheticTrain run;
  run.allreduce = 0.03;
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) t.summary["allreduce_baseline_bytes_per_s"] = 1e9;
  const auto verdicts = train_verdicts(analyze_train(timelines));
  const StallVerdict* comm = find(verdicts, "communication_bound");
  ASSERT_NE(comm, nullptr) << all_text(verdicts);
  ASSERT_EQ(find(verdicts, "straggler"), nullptr) << all_text(verdicts);
  EXPECT_NE(comm->recommendation.find("wait for each other"), std::string::npos) << comm->recommendation;
  EXPECT_EQ(all_text(verdicts).find("straggler"), std::string::npos) << all_text(verdicts);
}

// Readers busy in cache_read while their process hardly uses a CPU and fetches from the device as
// much as it sends: the cache's storage is the limit, named with its rate; not reader threads.
// The same readers on the CPU (as many cores as they are busy) are short of reader threads.
TEST(InputBound, ReadersWaitingForTheDeviceNameTheCacheStorage) {
  SyntheticTrain run;
  run.batch_wait = 0.08;
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) t.set_resources(resources_stopped(t, 0, 200));
  // The data rank sends 2 x 1 MB per step of ~0.18 s: ~11 MB/s; it fetches 8 MB/s from the device.
  set_storage_reads(timelines[0], storage_reads(timelines[0], 8e6, 0.05));
  const TrainAnalysis analysis = analyze_train(timelines);
  auto verdicts = train_verdicts(analysis);
  const StallVerdict* input = find(verdicts, "input_bound");
  ASSERT_NE(input, nullptr) << all_text(verdicts);
  EXPECT_EQ(input->rank, 0);
  EXPECT_EQ(input->numbers["busiest_data_stage"], "cache_read");
  EXPECT_EQ(input->numbers["cause"], "cache_storage") << all_text(verdicts);
  // 8 MB/s over the whole window, while the readers were in cache_read 90% of it.
  EXPECT_NEAR(input->numbers["storage_bytes_per_s"].get<double>(), 8e6 / 0.9, 0.05 * 8e6 / 0.9);
  EXPECT_NEAR(input->numbers["storage_cpu_cores"].get<double>(), 0.05, 1e-6);
  EXPECT_NE(input->summary.find("rank 0's readers waited for the cache's storage"), std::string::npos)
      << input->summary;
  EXPECT_EQ(input->recommendation.find("raise train.reader_threads"), std::string::npos) << input->recommendation;
  // report.md and report.html show the numbers report.json has: the data rank's bytes from storage
  // and the rate, and every rank's storage read and the cores it used meanwhile.
  const double storage_bytes = input->numbers["storage_read_bytes"].get<double>();
  const std::string from_storage =
      fmt::format("{} ({:.1f}% of sent) at {}", bytes_text(storage_bytes),
                  100 * storage_bytes / input->numbers["bytes_sent"].get<double>(),
                  bandwidth_text(input->numbers["storage_bytes_per_s"].get<double>()));
  ASSERT_NE(analysis.cpu_of(0), nullptr);
  const std::string md = train_report_markdown(analysis, verdicts, "run");
  const std::string html = train_report_html(analysis, verdicts, "run");
  EXPECT_NE(md.find("| " + from_storage + " |"), std::string::npos) << md;
  EXPECT_NE(html.find("<td>" + from_storage + "</td>"), std::string::npos);
  EXPECT_NE(md.find("| " + bytes_text(input->numbers["storage_read_bytes"].get<double>()) + " | 0.05 |"),
            std::string::npos)
      << md;
  EXPECT_NE(html.find("<td>0.05</td>"), std::string::npos);

  set_storage_reads(timelines[0], storage_reads(timelines[0], 8e6, 1.8));  // 2 lanes x 90% on CPU
  verdicts = train_verdicts(analyze_train(timelines));
  input = find(verdicts, "input_bound");
  ASSERT_NE(input, nullptr) << all_text(verdicts);
  EXPECT_EQ(input->numbers["cause"], "cache_read") << all_text(verdicts);
  EXPECT_NE(input->recommendation.find("raise train.reader_threads"), std::string::npos) << input->recommendation;

  // From the page cache (a few bytes from the device): the readers' own time, not the storage.
  set_storage_reads(timelines[0], storage_reads(timelines[0], 1e5, 0.05));
  const TrainAnalysis cached = analyze_train(timelines);
  verdicts = train_verdicts(cached);
  input = find(verdicts, "input_bound");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->numbers["cause"], "cache_read");
  // Under 10% of the bytes sent: the table gives the bytes and their share, no device rate.
  const std::string cell = from_storage_text(cached, cached.data_ranks.at(0));
  EXPECT_NE(cell.find("% of sent)"), std::string::npos) << cell;
  EXPECT_EQ(cell.find(" at "), std::string::npos) << cell;
}

// An all-reduce wait far beyond the baseline on every model rank alike, the ranks on two hosts:
// the network carries less than at the start. The same wait on one rank only is skew.
TEST(CommunicationBound, EvenWaitsAcrossHostsBeyondTheBaselineNameTheNetwork) {
  SyntheticTrain run;
  run.allreduce = 0.05;
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) t.summary["allreduce_baseline_bytes_per_s"] = 1e9;
  auto verdicts = train_verdicts(analyze_train(timelines));
  const StallVerdict* comm = find(verdicts, "communication_bound");
  ASSERT_NE(comm, nullptr) << all_text(verdicts);
  EXPECT_EQ(comm->numbers["cause"], "network_slower_than_baseline") << comm->summary;
  EXPECT_EQ(comm->numbers["hosts"], json({"node1", "node2"}));
  // 4 MB per step over its ~50 ms exposed wait.
  EXPECT_NEAR(comm->numbers["effective_bytes_per_s"].get<double>(), 4e6 / 0.05, 0.1 * 4e6 / 0.05);
  EXPECT_NE(comm->summary.find("crosses hosts node1, node2"), std::string::npos) << comm->summary;

  // On one host the ranks share no link: skew.
  for (auto& t : timelines) {
    if (t.rank > 0) t.host = "node1";
  }
  verdicts = train_verdicts(analyze_train(timelines));
  comm = find(verdicts, "communication_bound");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->numbers["cause"], "skew") << comm->summary;

  // The wait as long as the bytes take at the baseline is bandwidth.
  for (auto& t : timelines) t.summary["allreduce_baseline_bytes_per_s"] = 1e8;
  verdicts = train_verdicts(analyze_train(timelines));
  comm = find(verdicts, "communication_bound");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->numbers["cause"], "bandwidth") << comm->summary;
}

// A prep that failed on a full disk: rank 0's summary names the error; the report says why it
// stopped, names the rank, and is no hang.
TEST(PrepStopped, AFullDiskIsAStopOnAnErrorNotAHang) {
  auto timelines = testing::make_prep_timelines(2, 40, [](int) { return 1.0; });
  for (auto& t : timelines) t.status = "failed";
  timelines[0].summary = {{"stop_reason", "environment_error"},
                          {"error", "no space left on device: HDF5 H5Dwrite on /cache/shard-00003.h5.tmp"},
                          {"error_rank", 1},
                          {"error_host", "prep1"}};
  const auto analysis = analyze_prep(timelines, nullptr);
  const StallVerdict* v = find(analysis.verdicts, "stopped");
  ASSERT_NE(v, nullptr) << all_text(analysis.verdicts);
  EXPECT_EQ(find(analysis.verdicts, "hang"), nullptr) << all_text(analysis.verdicts);
  EXPECT_EQ(v->rank, 1);
  EXPECT_EQ(v->numbers["reason"], "environment_error");
  EXPECT_NE(v->summary.find("it did not hang: rank 1 (host prep1) failed: no space left on device"), std::string::npos)
      << v->summary;
  EXPECT_NE(v->summary.find("/cache/shard-00003.h5"), std::string::npos) << v->summary;
}

// A prep rank whose memory was refused (std::bad_alloc under `ulimit -v`, as a real run under
// 250 MB gave it, rank_result.cpp): the advice is about memory and threads, not the disk.
TEST(PrepStopped, AMemoryRefusalAdvisesMemoryNotTheDisk) {
  auto timelines = testing::make_prep_timelines(2, 40, [](int) { return 1.0; });
  for (auto& t : timelines) t.status = "failed";
  const std::string error = machine_refusal(std::bad_alloc())->what();
  timelines[0].summary = {{"stop_reason", "environment_error"}, {"error", error}, {"error_rank", 0}, {"error_host", "prep0"}};
  const auto analysis = analyze_prep(timelines, nullptr);
  const StallVerdict* v = find(analysis.verdicts, "stopped");
  ASSERT_NE(v, nullptr);
  EXPECT_NE(v->summary.find("an error of its environment (memory refused)"), std::string::npos) << v->summary;
  EXPECT_NE(v->recommendation.find("give each prep rank more memory"), std::string::npos) << v->recommendation;
  EXPECT_NE(v->recommendation.find("prep.threads"), std::string::npos) << v->recommendation;
  EXPECT_EQ(v->recommendation.find("free space"), std::string::npos) << v->recommendation;
}

json prep_report_with_rejects(int64_t rejects, int64_t rows) {
  return {{"corpus_rows", rows},
          {"rejects", rejects},
          {"reject_reasons", {{"decode_error", rejects - 2}, {"too_short", 2}}},
          {"ranks", json::array()}};
}

// A prep that stops because more rows were rejected than prep.max_reject_fraction says so and
// points at rejects.jsonl; it is no hang.
TEST(PrepStopped, TooManyRejectsIsAStopNotAHang) {
  auto timelines = testing::make_prep_timelines(2, 40, [](int) { return 1.0; });
  for (auto& t : timelines) {
    t.status = "stopped";
    t.settings["prep.max_reject_fraction"] = 0.05;
    t.summary = {{"stop_reason", "too_many_rejects"}, {"rejects_file", "/cache/rejects.jsonl"}};
  }
  const auto analysis = analyze_prep(timelines, prep_report_with_rejects(30, 80));
  const StallVerdict* v = find(analysis.verdicts, "stopped");
  ASSERT_NE(v, nullptr) << all_text(analysis.verdicts);
  EXPECT_EQ(find(analysis.verdicts, "hang"), nullptr) << all_text(analysis.verdicts);
  EXPECT_EQ(v->rank, -1);
  EXPECT_EQ(v->numbers["reason"], "too_many_rejects");
  EXPECT_NEAR(v->numbers["reject_fraction"].get<double>(), 30.0 / 80.0, 1e-9);
  EXPECT_NE(v->summary.find("30 of 80 corpus rows were rejected (37.5%), more than prep.max_reject_fraction = 5.0%"),
            std::string::npos)
      << v->summary;
  EXPECT_NE(v->summary.find("decode_error 28"), std::string::npos) << v->summary;
  EXPECT_NE(v->recommendation.find("/cache/rejects.jsonl"), std::string::npos) << v->recommendation;
}

// Timelines written before the stop reason existed said "failed": prep-report.json over the limit
// still reads as a stop.
TEST(PrepStopped, FailedTimelinesOverTheRejectLimitReadAsAStop) {
  auto timelines = testing::make_prep_timelines(2, 40, [](int) { return 1.0; });
  for (auto& t : timelines) {
    t.status = "failed";
    t.settings["prep.max_reject_fraction"] = 0.05;
  }
  const auto analysis = analyze_prep(timelines, prep_report_with_rejects(30, 80));
  EXPECT_NE(find(analysis.verdicts, "stopped"), nullptr) << all_text(analysis.verdicts);
  EXPECT_EQ(find(analysis.verdicts, "hang"), nullptr) << all_text(analysis.verdicts);
}

json padding_doc(double efficiency) {
  return {{"format", "sluice-padding/1"},
          {"n_buckets", 2},
          {"bucket_edges", json::array()},
          {"frame_budget", 0},
          {"buckets",
           {{{"bucket", 0}, {"shortest_frames", 100}, {"max_frames", 200}, {"batches", 10}, {"frame_efficiency", 0.9}},
            {{"bucket", 1}, {"shortest_frames", 201}, {"max_frames", 800}, {"batches", 10}, {"frame_efficiency", 0.5}}}},
          {"total", {{"batches", 20}, {"frame_efficiency", efficiency}, {"token_efficiency", 0.7}}},
          {"alternatives",
           {{{"n_buckets", 4}, {"frame_efficiency", 0.8}, {"padded_frames_saved_fraction", 0.125}},
            {{"n_buckets", 8}, {"frame_efficiency", 0.9}, {"padded_frames_saved_fraction", 0.222}}}}};
}

TEST(Padding, OverTenPercentNamesTheWorstBucketAndWhatMoreBucketsSave) {
  const auto v = padding_verdict(padding_doc(0.7));
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->severity, Severity::high);
  EXPECT_NEAR(v->numbers["waste_fraction"].get<double>(), 0.3, 1e-9);
  EXPECT_EQ(v->numbers["worst_bucket"], 1);
  EXPECT_NE(v->recommendation.find("raise train.n_buckets from 2 to 8"), std::string::npos) << v->recommendation;
  EXPECT_NE(v->recommendation.find("22.2% fewer padded frames"), std::string::npos) << v->recommendation;
  EXPECT_NE(v->recommendation.find("train.frame_budget"), std::string::npos) << v->recommendation;
  const auto moderate = padding_verdict(padding_doc(0.85));
  ASSERT_TRUE(moderate.has_value());
  EXPECT_EQ(moderate->severity, Severity::moderate);
  EXPECT_FALSE(padding_verdict(padding_doc(0.95)).has_value());
  EXPECT_FALSE(padding_verdict(nullptr).has_value());
}

TEST(Padding, JoinsTheTrainVerdicts) {
  SyntheticTrain run;
  auto analysis = analyze_train(make_train_timelines(run));
  analysis.padding = padding_doc(0.7);
  const auto verdicts = train_verdicts(analysis);
  ASSERT_NE(find(verdicts, "padding"), nullptr) << all_text(verdicts);
  EXPECT_NE(find(verdicts, "compute_bound"), nullptr) << all_text(verdicts);
}

}  // namespace
}  // namespace sluice::report
