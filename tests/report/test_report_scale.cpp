// `sluice report` on cluster-sized runs made by tests/report/synthetic_cluster.h (a small
// synthetic run cloned into 256 and 1,024 perturbed ranks, with a planted straggler model rank
// and a planted slow data rank): the verdicts name exactly the planted ranks, and trace.json holds
// a bounded selection that includes them and says what it left out. The time and memory this takes
// against the rank count is a benchmark (bench/report/bench_report_scale.sh), not asserted here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "timing/timeline_file.h"
#include "report/chrome_trace.h"
#include "report/write_report.h"
#include "synthetic_cluster.h"
#include "synthetic_run.h"

namespace sluice::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct PlantedRun {
  fs::path dir;
  testing::ClusterPlan plan;
};

PlantedRun make_planted_run(int ranks) {
  testing::SyntheticTrain small;
  small.steps = 120;
  small.noise = 0.002;
  const auto tmpl = testing::make_train_timelines(small);
  PlantedRun run;
  run.plan.ranks = ranks;
  testing::plant_default_ranks(run.plan, testing::cluster_shape(tmpl));
  run.dir = fs::path(SLUICE_REPORT_TEST_DIR) / ("scale-" + std::to_string(ranks));
  fs::remove_all(run.dir);
  testing::write_synthetic_cluster(tmpl, run.plan, run.dir);
  return run;
}

class ReportAtScale : public ::testing::TestWithParam<int> {};

TEST_P(ReportAtScale, NamesThePlantedRanksAndBoundsTheTrace) {
  const PlantedRun run = make_planted_run(GetParam());
  const std::string lines = write_train_report(run.dir);
  const json report = json::parse(read_file(run.dir / "report.json"));
  EXPECT_EQ(report["world_size"], GetParam());
  std::set<int> stragglers;
  for (const auto& v : report["verdicts"]) {
    if (v["kind"] == "straggler") stragglers.insert(v["rank"].get<int>());
  }
  EXPECT_EQ(stragglers, (std::set<int>{run.plan.straggler_rank, run.plan.slow_data_rank})) << lines;

  const json& selection = report["trace_selection"];
  const auto kept = selection["ranks"].get<std::set<int>>();
  EXPECT_EQ(kept.size(), trace_max_ranks);
  EXPECT_EQ(selection["ranks_left_out"], GetParam() - static_cast<int>(trace_max_ranks));
  for (int planted : {0, run.plan.straggler_rank, run.plan.slow_data_rank}) EXPECT_TRUE(kept.count(planted)) << planted;
  EXPECT_LT(fs::file_size(run.dir / "trace.json"), 200u * 1000 * 1000);
  const json trace = json::parse(read_file(run.dir / "trace.json"));
  EXPECT_EQ(trace["otherData"]["selection"], selection);
  std::set<int> processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(processes, kept);
  EXPECT_NE(read_file(run.dir / "report.md").find("trace.json holds 64 of"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReportAtScale, ::testing::Values(256, 1024),
                         [](const ::testing::TestParamInfo<int>& param) { return std::to_string(param.param) + "ranks"; });

// AT SCALE (report_documents.h): 4,096 ranks on 512 hosts, every model rank waiting on the
// all-reduce far beyond its baseline and one host's ranks longest. The verdict section fits a
// screen and names that host first, at most named_at_most hosts, and counts the rest; the per-rank
// tables show the distribution and the worst ranks; report.json keeps every rank.
TEST(ReportAtScale, FourThousandRanksOnFiveHundredHostsFitAScreen) {
  testing::SyntheticTrain small;
  small.model_ranks = 7;  // a group of 8 ranks per host
  small.steps = 40;
  small.allreduce = 0.02;
  auto tmpl = testing::make_train_timelines(small);
  for (auto& t : tmpl) t.summary["allreduce_baseline_bytes_per_s"] = 1e9;
  testing::ClusterPlan plan;
  plan.ranks = 4096;
  plan.slow_host = 300;
  const fs::path dir = fs::path(SLUICE_REPORT_TEST_DIR) / "scale-4096-hosts";
  fs::remove_all(dir);
  testing::write_synthetic_cluster(tmpl, plan, dir);
  write_train_report(dir);

  const json report = json::parse(read_file(dir / "report.json"));
  EXPECT_EQ(report["model_ranks"].size() + report["data_ranks"].size(), 4096u);
  const json* comm = nullptr;
  for (const auto& v : report["verdicts"]) {
    if (v["kind"] == "communication_bound") comm = &v;
  }
  ASSERT_NE(comm, nullptr) << report["verdicts"].dump();
  EXPECT_EQ((*comm)["numbers"]["cause"], "network_slower_than_baseline");
  EXPECT_EQ((*comm)["numbers"]["hosts"].size(), 512u) << "report.json names every host";

  const std::string md = read_file(dir / "report.md");
  const size_t from = md.find("## Verdict\n");
  ASSERT_NE(from, std::string::npos);
  const std::string section = md.substr(from, md.find("\nSteady state:", from) - from);
  EXPECT_LE(std::count(section.begin(), section.end(), '\n'), 40) << section;
  EXPECT_NE(section.find("hosts node-300, "), std::string::npos) << "the slowest host first: " << section;
  EXPECT_NE(section.find(" and 502 more"), std::string::npos) << section;
  // Each text that lists hosts names at most named_at_most of them.
  std::set<std::string> named;
  for (size_t at = section.find("node-"); at != std::string::npos; at = section.find("node-", at + 1)) {
    named.insert(section.substr(at, section.find_first_not_of("0123456789", at + 5) - at));
  }
  EXPECT_LE(named.size(), named_at_most) << section;
  EXPECT_TRUE(named.count("node-300"));

  // The per-rank tables: the distribution and the worst ranks, not 4,096 rows.
  EXPECT_LT(std::count(md.begin(), md.end(), '\n'), 150) << md;
  EXPECT_NE(md.find("3584 model ranks: the median and p95 of each column over all of them, then the 10 with the highest busy p50 (report.json has every rank)"), std::string::npos);
  EXPECT_NE(md.find("| **median** (3584 model ranks) |"), std::string::npos);
  // Per host: the slow host's ranks wait longest on the all-reduce, so it heads the hosts table.
  const size_t hosts = md.find("## Hosts");
  ASSERT_NE(hosts, std::string::npos);
  EXPECT_NE(md.find("512 hosts: the median and p95", hosts), std::string::npos);
  EXPECT_NE(md.find("| **p95** |", hosts), std::string::npos);
  EXPECT_NE(md.find("|\n| node-300 | 7 |", hosts), std::string::npos) << md.substr(hosts, 1500);
  const std::string html = read_file(dir / "report.html");
  EXPECT_EQ(html.find("rank 4000 "), std::string::npos) << "no line or row per rank";
  EXPECT_NE(html.find("median of the model ranks"), std::string::npos);
  // report.html has the hosts table too, the slow host first among the worst.
  const size_t html_hosts = html.find("Hosts (their model ranks; ms)");
  ASSERT_NE(html_hosts, std::string::npos);
  EXPECT_NE(html.find("512 hosts: the median and p95", html_hosts), std::string::npos);
  EXPECT_NE(html.find("node-300", html_hosts), std::string::npos);
  // ranks.csv: a header and one row per rank, in rank order, every rank's host.
  std::ifstream csv(dir / "ranks.csv");
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_EQ(line.rfind("rank,host,role,gpu,steady_steps,step_p50_ms,", 0), 0u) << line;
  int rows = 0;
  std::set<std::string> csv_hosts;
  while (std::getline(csv, line)) {
    EXPECT_EQ(line.substr(0, line.find(',')), std::to_string(rows)) << line;
    const size_t host_at = line.find(',') + 1;
    csv_hosts.insert(line.substr(host_at, line.find(',', host_at) - host_at));
    ++rows;
  }
  EXPECT_EQ(rows, 4096);
  EXPECT_EQ(csv_hosts.size(), 512u);
  if (!HasFailure()) fs::remove_all(dir);  // 100 MB of timelines; kept to look at when it fails
}

// A prep job of 40 ranks, one slow: report.md's prep-rank table shows the median, the p95 and the
// slowest ranks first; report.html's bars the median rank and the worst; report.json every rank.
TEST(ReportAtScale, PrepRanksAboveTheThresholdShowTheDistributionAndTheSlowest) {
  const fs::path dir = fs::path(SLUICE_REPORT_TEST_DIR) / "scale-prep-40";
  fs::remove_all(dir);
  for (const auto& t : testing::make_prep_timelines(40, 40, [](int rank) { return rank == 17 ? 3.0 : 1.0; })) {
    timing::write_timeline(dir, t);
  }
  write_report(dir);
  EXPECT_EQ(json::parse(read_file(dir / "report.json"))["ranks"].size(), 40u);
  const std::string md = read_file(dir / "report.md");
  const size_t table = md.find("40 prep ranks: the median and p95 of each column over all of them, then the 10 with "
                               "the lowest rows/s");
  ASSERT_NE(table, std::string::npos) << md;
  const size_t median = md.find("| **median** (40 prep ranks) |", table);
  const size_t slowest = md.find("| rank 17 ", table);
  ASSERT_NE(median, std::string::npos) << md;
  ASSERT_NE(slowest, std::string::npos) << md;
  EXPECT_EQ(md.find("| rank", md.find("| **p95** |", median)), slowest) << "the slowest rank right after p95";
  const std::string html = read_file(dir / "report.html");
  EXPECT_NE(html.find("Throughput per rank: the median of 40 ranks and the 10 with the smallest total"), std::string::npos);
}

// A small event budget: the trace keeps a window of consecutive steady steps within it, and says so.
TEST(TraceSelection, AWindowOfStepsKeepsTheTraceUnderItsEventBudget) {
  const PlantedRun run = make_planted_run(30);
  const TrainAnalysis analysis = analyze_train(timelines_on_disk(run.dir));
  const TraceSelection selection =
      choose_trace(analysis, {run.plan.straggler_rank}, TraceLimits{8, 2'000});
  ASSERT_TRUE(selection.window);
  EXPECT_EQ(selection.ranks.size(), 8u);
  EXPECT_GE(selection.first_step, analysis.steady.first_step);
  EXPECT_LE(selection.last_step, analysis.steady.last_step);
  EXPECT_LT(selection.last_step - selection.first_step + 1, 120);
  write_chrome_trace(run.dir / "windowed-trace.json", timelines_on_disk(run.dir), selection);
  const json trace = json::parse(read_file(run.dir / "windowed-trace.json"));
  size_t events = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") continue;
    ++events;
    if (e["ph"] == "X") {
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      EXPECT_LE(e["ts"].get<double>(), static_cast<double>(selection.end_ns - selection.start_ns) / 1000.0);
    }
  }
  EXPECT_LE(events, 2'000u * 3 / 2) << "flows come on top of the spans and counters planned";
  EXPECT_GT(events, 2'000u / 2);
  EXPECT_EQ(trace["otherData"]["selection"]["window"], true);
  EXPECT_NE(selection.describe().find("steps " + std::to_string(selection.first_step)), std::string::npos);
}

}  // namespace
}  // namespace sluice::report
