// The files the report writes: trace.json's structure, report.json's fields, report.md, the prep
// report, the error for a directory without timelines, and report.html in headless Chromium.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/file_util.h"
#include "report/chrome_trace.h"
#include "report/report_documents.h"
#include "report/report_text.h"
#include "report/streamed_json.h"
#include "report/write_report.h"
#include "tests/report/synthetic_run.h"

namespace sluice::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh run directory under the build tree, kept after the test for a look.
fs::path run_dir(const std::string& name) {
  const fs::path dir = fs::path(SLUICE_REPORT_TEST_DIR) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path write_train_run(const std::string& name, const testing::SyntheticTrain& run) {
  const fs::path dir = run_dir(name);
  for (const auto& t : make_train_timelines(run)) timing::write_timeline(dir, t);
  return dir;
}

json read_json(const fs::path& path) { return json::parse(read_file(path)); }

TEST(TrainReport, WritesTheFourFilesAndReturnsTheVerdicts) {
  testing::SyntheticTrain run;
  run.batch_wait = 0.043;  // 30% input wait
  const fs::path dir = write_train_run("train-input-bound", run);
  const std::string summary = write_report(dir);
  EXPECT_NE(summary.find("input-bound HIGH"), std::string::npos) << summary;
  EXPECT_NE(summary.find("-> "), std::string::npos) << summary;
  for (const char* file : {"report.md", "report.json", "report.html", "trace.json"}) {
    EXPECT_TRUE(fs::exists(dir / file)) << file;
  }
  const std::string md = read_file(dir / "report.md");
  // The verdict comes first, then the tables.
  EXPECT_LT(md.find("## Verdict"), md.find("## Model role"));
  EXPECT_NE(md.find("**input-bound HIGH**"), std::string::npos) << md;
  EXPECT_NE(md.find("| rank 1 · node1 · GPU0 · model |"), std::string::npos) << md;
  EXPECT_NE(md.find("## Data ranks"), std::string::npos);
  EXPECT_NE(md.find("## Clock"), std::string::npos);
}

TEST(TrainReport, ReportJsonHasTheDocumentedFields) {
  testing::SyntheticTrain run;
  run.batch_wait = 0.043;
  const fs::path dir = write_train_run("train-json", run);
  write_train_report(dir);
  const json j = read_json(dir / "report.json");
  EXPECT_EQ(j["format"], "sluice-report/1");
  EXPECT_EQ(j["job"], "train");
  EXPECT_EQ(j["world_size"], 3);
  ASSERT_FALSE(j["verdicts"].empty());
  const json& v = j["verdicts"][0];
  for (const char* key : {"kind", "severity", "summary", "recommendation", "numbers", "rank"}) {
    EXPECT_TRUE(v.contains(key)) << key;
  }
  EXPECT_EQ(v["kind"], "input_bound");
  EXPECT_NEAR(v["numbers"]["input_wait_fraction"].get<double>(), 0.30, 0.01);
  EXPECT_EQ(j["steady_state"]["enough"], true);
  EXPECT_EQ(j["steady_state"]["steady_steps"], 72);
  EXPECT_EQ(j["steady_state"]["warmup_steps"], 8);
  EXPECT_NEAR(j["model_role"]["input_wait_fraction"].get<double>(), 0.30, 0.01);
  for (const char* stage : {"batch_wait", "forward", "backward", "allreduce_exposed", "optimizer", "sync",
                            "validation", "checkpoint"}) {
    EXPECT_TRUE(j["model_role"]["stages"].contains(stage)) << stage;
  }
  ASSERT_EQ(j["model_ranks"].size(), 2u);
  const json& m = j["model_ranks"][0];
  EXPECT_EQ(m["rank"], 1);
  EXPECT_EQ(m["steps"], 80);
  EXPECT_NEAR(m["stages"]["forward"]["per_step"]["p50"].get<double>(), 0.040, 0.001);
  for (const char* key : {"p50", "p95", "p99", "mean", "count", "total", "max"}) {
    EXPECT_TRUE(m["step_seconds"].contains(key)) << key;
  }
  EXPECT_EQ(m["step_series"].size(), 80u);
  ASSERT_EQ(j["data_ranks"].size(), 1u);
  const json& d = j["data_ranks"][0];
  EXPECT_EQ(d["busiest_stage"], "cache_read");
  EXPECT_EQ(d["feeds"], json({1, 2}));
  EXPECT_EQ(d["reader_lanes"], 2);
  EXPECT_EQ(j["clock"]["causality"]["violations"], 0);
  EXPECT_EQ(j["clock"]["causality"]["pairs_checked"], 160);
  EXPECT_EQ(j["hang"]["any"], false);
  EXPECT_EQ(j["settings"]["train.credits"], 3);
}

// runtime.timeouts: measured (runtime/train/progress_watchdog.h): each rank's summary has its
// deadlines; report.json's progress_deadlines and report.md's table have one entry a role (the
// largest deadline of its ranks), however many ranks.
TEST(TrainReport, ProgressDeadlinesAreOneEntryARole) {
  testing::SyntheticTrain run;
  auto timelines = make_train_timelines(run);
  for (auto& t : timelines) {
    const double p99 = t.role == "model" ? 0.1 * t.rank : 0.01;
    t.summary["progress_deadline"] = {
        {"role", t.role},
        {"mode", "measured"},
        {"step", {{"measured", 80 - t.rank}, {"warmup", 10}, {"p99_s", p99}, {"factor", 5.0}, {"min_s", 0.2},
                  {"startup_s", 600.0}, {"deadline_s", std::max(0.2, 5 * p99)}, {"from", "measured"}}},
        {"checkpoint", {{"measured", 0}, {"deadline_s", 600.0}}},
        {"validation", {{"measured", 1}, {"deadline_s", 3.0}}}};
  }
  const fs::path dir = run_dir("train-progress-deadlines");
  for (const auto& t : timelines) timing::write_timeline(dir, t);
  write_train_report(dir);
  const json deadlines = read_json(dir / "report.json")["progress_deadlines"];
  ASSERT_EQ(deadlines.size(), 2u) << deadlines.dump(2);
  const json& data = deadlines[0];
  const json& model = deadlines[1];
  EXPECT_EQ(data["role"], "data");
  EXPECT_EQ(data["ranks"], 1);
  EXPECT_DOUBLE_EQ(data["step_deadline_s"].get<double>(), 0.2);
  EXPECT_EQ(model["role"], "model");
  EXPECT_EQ(model["ranks"], 2);
  EXPECT_EQ(model["mode"], "measured");
  EXPECT_EQ(model["warmup_steps"], 10);
  EXPECT_DOUBLE_EQ(model["factor"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(model["step_p99_s"].get<double>(), 0.2) << "the largest of the role's ranks";
  EXPECT_DOUBLE_EQ(model["step_deadline_s"].get<double>(), 1.0);
  EXPECT_EQ(model["steps_measured"], 78) << "the fewest of the role's ranks";
  EXPECT_TRUE(model["checkpoint_deadline_s"].is_null()) << "no model rank measured a checkpoint";
  EXPECT_DOUBLE_EQ(model["validation_deadline_s"].get<double>(), 3.0);
  const std::string md = read_file(dir / "report.md");
  EXPECT_NE(md.find("## Progress deadlines (runtime.timeouts)"), std::string::npos) << md;
  EXPECT_NE(md.find("| model | 2 | measured | 10 | 0.2 | 5 | 1 | - |"), std::string::npos) << md;
  const std::string html = read_file(dir / "report.html");
  EXPECT_NE(html.find("Progress deadlines (runtime.timeouts)"), std::string::npos) << html;
  EXPECT_NE(html.find(">measured<"), std::string::npos) << html;
}

// GPU busy, the headline of a run on GPUs: each model rank's share of its steady time in gpu_step
// spans (CUDA events), pooled over the ranks, the least busy named; absent for CPU model ranks.
TEST(TrainReport, GpuBusyIsTheHeadlineWhenTheModelRanksTimedTheirGpu) {
  testing::SyntheticTrain run;
  run.gpu_busy = {0.90, 0.70};
  const fs::path dir = write_train_run("train-gpu-busy", run);
  write_train_report(dir);
  const json j = read_json(dir / "report.json");
  ASSERT_TRUE(j["gpu_busy"].is_object()) << j["gpu_busy"];
  EXPECT_NEAR(j["gpu_busy"]["fraction"].get<double>(), 0.80, 0.005);
  EXPECT_EQ(j["gpu_busy"]["lowest_rank"], 2);
  EXPECT_NEAR(j["gpu_busy"]["lowest_fraction"].get<double>(), 0.70, 0.005);
  EXPECT_NEAR(j["model_ranks"][0]["gpu_busy_fraction"].get<double>(), 0.90, 0.005);
  EXPECT_NEAR(j["model_ranks"][1]["gpu_busy_fraction"].get<double>(), 0.70, 0.005);
  const std::string md = read_file(dir / "report.md");
  // Before the verdict: the figure the report is opened for.
  const auto headline = md.find("**GPU busy 80.0% of the model ranks' steady step time");
  EXPECT_NE(headline, std::string::npos) << md;
  EXPECT_LT(headline, md.find("## Verdict"));
  EXPECT_NE(md.find("least busy: rank 2 · node2 · GPU1 · model at 70.0%"), std::string::npos) << md;
  EXPECT_NE(read_file(dir / "report.html").find("GPU busy 80.0%"), std::string::npos);

  const fs::path cpu = write_train_run("train-no-gpu-busy", testing::SyntheticTrain{});
  write_train_report(cpu);
  EXPECT_TRUE(read_json(cpu / "report.json")["gpu_busy"].is_null());
  EXPECT_EQ(read_file(cpu / "report.md").find("GPU busy"), std::string::npos);
}

TEST(TrainReport, TraceJsonHasProcessesLanesFlowsAndCounters) {
  testing::SyntheticTrain run;
  run.skew_ns = {0, 2'000'000'000, -1'000'000'000};
  run.queue_depth = 1;
  const fs::path dir = write_train_run("train-trace", run);
  write_train_report(dir);
  const json trace = read_json(dir / "trace.json");
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::map<int, std::string> process_names;
  std::set<std::pair<int, int>> named_threads;
  std::map<int64_t, std::tuple<int, int64_t, double>> starts;  // id -> (pid, sequence, ts)
  std::map<int64_t, std::tuple<int, int64_t, double>> finishes;
  std::set<std::tuple<int, int, int64_t>> flow_keys;
  int complete = 0, counters = 0, starts_seen = 0;
  double earliest = 1e300;
  for (const json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") named_threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (ph == "X") {
      ++complete;
      earliest = std::min(earliest, e["ts"].get<double>());
      for (const char* key : {"step", "bytes", "peer", "sequence"}) EXPECT_TRUE(e["args"].contains(key)) << key;
      EXPECT_TRUE(named_threads.count({e["pid"].get<int>(), e["tid"].get<int>()})) << e.dump();
    }
    if (ph == "C") {
      ++counters;
      EXPECT_TRUE(e["name"] == "queue_depth" || e["name"] == "credits") << e.dump();
      EXPECT_TRUE(e["args"].contains(e["name"].get<std::string>()));
    }
    if (ph == "s") {
      ++starts_seen;
      const int64_t id = e["id"];
      EXPECT_EQ(starts.count(id), 0u) << "flow id used twice: " << id;
      starts[id] = {e["pid"], e["args"]["sequence"], e["ts"]};
    }
    if (ph == "f") {
      EXPECT_EQ(e["bp"], "e");
      finishes[e["id"]] = {e["pid"], e["args"]["sequence"], e["ts"]};
    }
  }
  EXPECT_EQ(process_names[0], "rank 0 · node0 · CPU · data");
  EXPECT_EQ(process_names[1], "rank 1 · node1 · GPU0 · model");
  EXPECT_EQ(process_names[2], "rank 2 · node2 · GPU1 · model");
  EXPECT_TRUE(named_threads.count({0, 1}));  // reader 1
  EXPECT_GT(complete, 0);
  EXPECT_DOUBLE_EQ(earliest, 0.0);  // relative to the earliest aligned span
  EXPECT_EQ(counters, 2 * run.steps);
  // One flow per batch (2 model ranks x steps), each "s" with exactly one "f" of the same id,
  // from the data rank to the model rank, same sequence, never ending before it starts.
  EXPECT_EQ(starts_seen, 2 * run.steps);
  EXPECT_EQ(starts.size(), finishes.size());
  for (const auto& [id, start] : starts) {
    ASSERT_EQ(finishes.count(id), 1u) << "flow " << id << " has no finish";
    const auto& finish = finishes.at(id);
    EXPECT_EQ(std::get<0>(start), 0);
    EXPECT_EQ(std::get<1>(start), std::get<1>(finish));
    EXPECT_LE(std::get<2>(start), std::get<2>(finish));
    flow_keys.insert({std::get<0>(start), std::get<0>(finish), std::get<1>(start)});
  }
  EXPECT_EQ(flow_keys.size(), starts.size());  // ids unique per (src, dst, seq)
  EXPECT_NE(flow_id(0, 1, 5, 3), flow_id(0, 2, 5, 3));
  EXPECT_NE(flow_id(0, 1, 5, 3), flow_id(1, 0, 5, 3));
  EXPECT_NE(flow_id(0, 1, 5, 3), flow_id(0, 1, 6, 3));
}

TEST(TrainReport, FailedRunReportNamesTheMissingRank) {
  testing::SyntheticTrain run;
  run.model_ranks = 3;
  const fs::path dir = run_dir("train-hang");
  for (auto& t : make_train_timelines(run)) {
    if (t.rank == 2) continue;  // never wrote its file
    if (t.rank != 0) {
      t.status = "failed";
      t.waiting_for = 2;
    }
    timing::write_timeline(dir, t);
  }
  const std::string summary = write_train_report(dir);
  EXPECT_EQ(summary.rfind("hang HIGH", 0), 0u) << summary;
  EXPECT_NE(summary.find("rank 2 wrote no timeline"), std::string::npos) << summary;
  const json j = read_json(dir / "report.json");
  EXPECT_EQ(j["hang"]["culprit"], 2);
  EXPECT_EQ(j["hang"]["ranks"][2]["status"], "missing");
  EXPECT_NE(read_file(dir / "report.md").find("## Ranks at the end"), std::string::npos);
}

TEST(PrepReport, WritesItsFilesInTheCacheDirectory) {
  const fs::path dir = run_dir("prep");
  size_t spans = 0;
  for (const auto& t : testing::make_prep_timelines(3, 40, [](int rank) { return rank == 1 ? 2.5 : 1.0; })) {
    timing::write_timeline(dir, t);
    spans += t.spans.size();
  }
  write_file_atomically(dir / "prep-report.json",
                        json{{"corpus_rows", 122},
                             {"rejects", 2},
                             {"reject_reasons", {{"too_short", 2}}},
                             {"ranks", {{{"rank", 0}, {"audio_seconds", 100.0}}}}}
                            .dump());
  const std::string summary = write_report(dir);  // detected as prep from the timelines
  EXPECT_NE(summary.find("straggler"), std::string::npos) << summary;
  const json j = read_json(dir / "report.json");
  EXPECT_EQ(j["job"], "prep");
  EXPECT_EQ(j["verdicts"][0]["rank"], 1);
  EXPECT_EQ(j["reject_reasons"]["too_short"], 2);
  EXPECT_EQ(j["ranks"][0]["rows"], 40);
  EXPECT_GT(j["ranks"][0]["audio_seconds_per_second"].get<double>(), 0);
  EXPECT_TRUE(j["ranks"][1]["audio_seconds"].is_null());
  const std::string md = read_file(dir / "report.md");
  EXPECT_NE(md.find("| too_short | 2 |"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(dir / "report.html"));
  // The prep trace holds every span of every rank, on one clock starting at 0.
  const json trace = read_json(dir / "trace.json");
  size_t complete = 0;
  std::set<int> named;
  double earliest = 1e300;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      earliest = std::min(earliest, e["ts"].get<double>());
    }
    if (e["name"] == "process_name") named.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(complete, spans);
  EXPECT_EQ(named, (std::set<int>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(earliest, 0.0);
  EXPECT_EQ(trace["otherData"]["selection"]["ranks_left_out"], 0);
  EXPECT_EQ(trace["otherData"]["selection"]["window"], false);
}

TEST(Report, NoTimelinesIsAnErrorNamingTheDirectory) {
  const fs::path dir = run_dir("empty");
  try {
    write_report(dir);
    FAIL() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find((dir / "timeline").string()), std::string::npos) << error.what();
  }
}

// report.html in Debian's headless Chromium: the page's script must run to its end (it sets
// data-ready="1" on <body>) without an uncaught error; the screenshot stays in the build tree.
std::string run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  pclose(pipe);
  return output;
}

void check_in_chromium(const fs::path& html, const fs::path& screenshot) {
  const std::string chromium = run_command("command -v chromium");
  ASSERT_FALSE(chromium.empty()) << "chromium is not installed: scripts/install-deps.sh installs it (apt-get install chromium)";
  const std::string flags = "chromium --headless=new --no-sandbox --disable-gpu --user-data-dir=" +
                            (html.parent_path() / "chromium-profile").string() + " ";
  const std::string dom = run_command(flags + "--enable-logging=stderr --v=0 --dump-dom file://" + html.string());
  EXPECT_NE(dom.find("data-ready=\"1\""), std::string::npos) << "the page's script did not finish:\n" << dom.substr(0, 4000);
  EXPECT_EQ(dom.find("Uncaught"), std::string::npos) << dom.substr(0, 4000);
  EXPECT_NE(dom.find("<svg class=\"chart\""), std::string::npos);
  fs::remove(screenshot);
  run_command(flags + "--window-size=1200,2000 --screenshot=" + screenshot.string() + " file://" + html.string());
  ASSERT_TRUE(fs::exists(screenshot)) << "no screenshot at " << screenshot;
  EXPECT_GT(fs::file_size(screenshot), 10'000u);
}

TEST(ReportHtml, TrainPageRunsInHeadlessChromium) {
  testing::SyntheticTrain run;
  run.steps = 120;
  run.batch_wait = 0.02;
  run.queue_depth = 1;
  run.extra_wait = [](int64_t step) { return (step + 1) % 7 == 0 ? 0.05 : 0.0; };
  const fs::path dir = write_train_run("html-train", run);
  write_train_report(dir);
  const std::string html = read_file(dir / "report.html");
  EXPECT_EQ(html.find("http://"), std::string::npos);  // self-contained
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  check_in_chromium(dir / "report.html", fs::path(SLUICE_REPORT_TEST_DIR) / "report-train.png");
}

TEST(ReportHtml, LongRunsAreThinnedButKeepTheirSpikes) {
  testing::SyntheticTrain run;
  run.steps = 6000;
  run.extra_wait = [](int64_t step) { return step == 4321 ? 2.0 : 0.0; };
  const fs::path dir = write_train_run("html-long", run);
  write_train_report(dir);
  const std::string html = read_file(dir / "report.html");
  EXPECT_LT(html.size(), 1'000'000u);
  // The one 2.1 s step survives the thinning: the y axis's top tick is 1.05 x its 2.103 s.
  EXPECT_NE(html.find("text-anchor='end'>2.21<"), std::string::npos);
}

TEST(ReportHtml, PrepPageRunsInHeadlessChromium) {
  const fs::path dir = run_dir("html-prep");
  for (const auto& t : testing::make_prep_timelines(2, 30, [](int) { return 1.0; })) timing::write_timeline(dir, t);
  write_prep_report(dir);
  check_in_chromium(dir / "report.html", fs::path(SLUICE_REPORT_TEST_DIR) / "report-prep.png");
}

// named_list (report_text.h): a short list as given; a long one its heaviest named_at_most,
// heaviest first, and a count of the rest.
TEST(ReportText, NamedListNamesTheHeaviestAndCountsTheRest) {
  EXPECT_EQ(named_list({{"b", 1}, {"a", 2}}), "b, a");
  EXPECT_EQ(rank_list({3, 1, 2}), "3, 1, 2");
  EXPECT_EQ(rank_list({}), "none");
  std::vector<NamedItem> hosts;
  for (int h = 0; h < 512; ++h) hosts.push_back({"node-" + std::to_string(h), h == 300 ? 9.0 : 1.0});
  const std::string list = named_list(hosts);
  EXPECT_EQ(list.rfind("node-300, node-0, node-1, ", 0), 0u) << list;
  EXPECT_NE(list.find(", node-8 and 502 more"), std::string::npos) << list;
  EXPECT_EQ(std::count(list.begin(), list.end(), ','), static_cast<long>(named_at_most) - 1);
  std::vector<int> ranks(100);
  for (int r = 0; r < 100; ++r) ranks[static_cast<size_t>(r)] = r;
  const std::string waiters = rank_list(ranks);
  EXPECT_EQ(waiters.rfind("0, 1, 2, ", 0), 0u) << waiters;
  EXPECT_EQ(waiters.substr(waiters.size() - 16), "8, 9 and 90 more") << waiters;
}

// rank_table (report_documents.h): up to full_table_ranks rows as given; above, the median and
// p95 of each numeric column written as its cells are, then the worst rows by the key.
TEST(ReportText, RankTableAboveTheThresholdShowsTheDistributionAndTheWorst) {
  DocumentTable small{{"rank", "ms"}, {}, {{"rank 0", "1.0"}, {"rank 1", "2.0"}}, {}};
  ReportDocument few;
  rank_table(few, small, 1, Worst::highest, "ranks");
  ASSERT_EQ(few.blocks().size(), 1u);
  EXPECT_EQ(few.blocks()[0].table.rows, small.rows);

  DocumentTable large{{"rank", "ms", "share", "feeds"}, {}, {}, {}};
  for (int r = 0; r < 100; ++r) {
    large.rows.push_back({"rank " + std::to_string(r), std::to_string(r) + ".0", std::to_string(100 - r) + "%", "1,2"});
  }
  ReportDocument many;
  rank_table(many, large, 2, Worst::lowest, "ranks");
  ASSERT_EQ(many.blocks().size(), 2u);
  EXPECT_NE(many.blocks()[0].text.find("100 ranks: the median and p95"), std::string::npos);
  EXPECT_NE(many.blocks()[0].text.find("the 10 with the lowest share"), std::string::npos);
  const auto& rows = many.blocks()[1].table.rows;
  ASSERT_EQ(rows.size(), 2 + worst_ranks_shown);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"**median** (100 ranks)", "49.0", "50%", ""}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"**p95**", "94.0", "95%", ""}));
  EXPECT_EQ(rows[2][0], "rank 99");  // share 1%: the lowest
  EXPECT_EQ(rows.back()[0], "rank 90");
}

// report.json is written member by member (streamed_json.h); its bytes must be nlohmann's dump(2)
// of the whole tree, which readers and scripts/report-golden.sh compare against.
TEST(StreamedJson, WritesTheBytesOfDumpTwoOfTheWholeObject) {
  StreamedJson inner;
  inner.members = {{"any", true}, {"reason", "rank 3 \"node-7\"\nwaited"}, {"empty", json::object()}};
  inner.arrays["ranks"] = {3, [](size_t i) {
                             return json{{"rank", i}, {"channels", json::array({{{"peer", i + 1}}})}, {"e", json::array()}};
                           }};
  inner.arrays["none"] = {0, [](size_t) { return json(); }};
  StreamedJson document;
  document.members = {{"format", "x"}, {"zeta", {1, 2.5, nullptr}}, {"b\u00e9", "caf\u00e9"}, {"nested", {{"a", {{"b", 1}}}}}};
  document.arrays["model_ranks"] = {2, [](size_t i) { return json{{"step_series", {{i, 0.5, true}, {i + 1, 0.25, false}}}}; }};
  document.objects["hang"] = inner;
  document.objects["empty_object"] = StreamedJson{};

  const fs::path file = run_dir("streamed-json") / "out.json";
  AtomicFileWriter out(file);
  document.write(out);
  out.write("\n");
  out.commit();
  const std::string expected = document.to_json().dump(2) + "\n";
  EXPECT_EQ(read_file(file), expected);
  EXPECT_EQ(json::parse(read_file(file))["hang"]["ranks"][2]["channels"][0]["peer"], 3);
  EXPECT_NE(expected.find("\"none\": []"), std::string::npos);
  EXPECT_FALSE(fs::exists(file.string() + ".tmp-" + std::to_string(::getpid())));
}

// A writer dropped before commit() (an exception while writing) leaves the old file as it was.
TEST(StreamedJson, AnUncommittedWriterLeavesTheOldFile) {
  const fs::path file = run_dir("streamed-json-uncommitted") / "report.json";
  write_file_atomically(file, "old\n");
  {
    AtomicFileWriter out(file);
    out.write(std::string(3 << 20, 'x'));  // past the writer's buffer: bytes reach the temp file
  }
  EXPECT_EQ(read_file(file), "old\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(file.parent_path()), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace sluice::report
