// `sluice bench sweep`'s arithmetic: the grid, reading rank files, spreads and when to recommend.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/measure/bench_sweep.h"
#include "common/error.h"
#include "tests/support/command.h"

namespace sluice::benchmark {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(Sweep, ParsesAnAxisAndRefusesMalformedOnes) {
  const SweepAxis axis = parse_sweep("train.batch_size=4, 8,16");
  EXPECT_EQ(axis.key, "train.batch_size");
  EXPECT_EQ(axis.values, (std::vector<std::string>{"4", "8", "16"}));
  EXPECT_THROW(parse_sweep("train.batch_size"), ConfigError);
  EXPECT_THROW(parse_sweep("=4,8"), ConfigError);
  EXPECT_THROW(parse_sweep("train.credits=,"), ConfigError);
}

TEST(Sweep, TheGridIsEveryCombinationFirstAxisSlowest) {
  const auto points = grid({parse_sweep("train.batch_size=4,8"), parse_sweep("train.credits=1,3")});
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(describe(points[0]), "train.batch_size=4 train.credits=1");
  EXPECT_EQ(describe(points[1]), "train.batch_size=4 train.credits=3");
  EXPECT_EQ(describe(points[3]), "train.batch_size=8 train.credits=3");
  EXPECT_EQ(grid({}).size(), 1u);
  EXPECT_EQ(describe(grid({}).front()), "(defaults)");
}

TEST(Sweep, FeedOnlySettingsShareOneReplayBaseline) {
  const Point point{{"train.batch_size", "8"}, {"train.credits", "1"}, {"train.reader_threads", "4"},
                    {"roles.data_per_node", "2"}};
  EXPECT_EQ(shape_key(point), (Point{{"train.batch_size", "8"}, {"roles.data_per_node", "2"}}));
}

void write_rank(const fs::path& run, int rank, const json& stats) {
  fs::create_directories(run / "ranks");
  std::ofstream(run / "ranks" / ("rank-" + std::to_string(rank) + ".json")) << stats.dump();
}

TEST(Sweep, ReadsARunSummingModelRanksAndTakingTheWorstWait) {
  const fs::path run = test::scratch_dir("sweep-test", "run");
  write_rank(run, 0, {{"role", "data"}, {"read_seconds", 1.0}, {"peak_rss_bytes", 300}});
  write_rank(run, 1, {{"role", "model"}, {"steady_padded_frames_per_second", 1000.0}, {"wall_seconds", 10.0},
                      {"input_wait_seconds", 0.5}, {"peak_rss_bytes", 500}});
  write_rank(run, 2, {{"role", "model"}, {"steady_padded_frames_per_second", 1500.0}, {"wall_seconds", 10.0},
                      {"input_wait_seconds", 1.0}, {"peak_rss_bytes", 400}});
  const RunMeasurement m = read_run(run);
  ASSERT_TRUE(m.ok) << m.error;
  EXPECT_EQ(m.model_ranks, 2);
  EXPECT_DOUBLE_EQ(m.frames_per_s, 2500.0);
  EXPECT_DOUBLE_EQ(m.input_wait_fraction, 0.1);
  ASSERT_TRUE(m.peak_rss_bytes.has_value());
  EXPECT_EQ(*m.peak_rss_bytes, 500);
}

TEST(Sweep, ARunWithoutPeakRssOrRankFilesSaysSo) {
  const fs::path run = test::scratch_dir("sweep-test", "no-rss");
  write_rank(run, 0, {{"role", "model"}, {"steady_padded_frames_per_second", 10.0}, {"wall_seconds", 1.0},
                      {"input_wait_seconds", 0.0}});
  const RunMeasurement m = read_run(run);
  ASSERT_TRUE(m.ok);
  EXPECT_FALSE(m.peak_rss_bytes.has_value());
  const RunMeasurement missing = read_run(run / "nothing");
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.error.find("did not finish"), std::string::npos);
}

RunMeasurement run_at(double frames_per_s) {
  RunMeasurement m;
  m.ok = true;
  m.model_ranks = 1;
  m.frames_per_s = frames_per_s;
  m.input_wait_fraction = 0.01;
  return m;
}

PointResult point(const std::string& batch, std::vector<double> repeats, double replay) {
  PointResult result;
  result.point = {{"train.batch_size", batch}};
  for (double r : repeats) result.runs.push_back(run_at(r));
  result.replay = run_at(replay);
  return result;
}

TEST(Sweep, SpreadAndEfficiencyPerPoint) {
  const PointResult p = point("8", {900, 1000, 800}, 1000);
  const Spread frames = p.frames_per_s();
  EXPECT_DOUBLE_EQ(frames.min, 800);
  EXPECT_DOUBLE_EQ(frames.max, 1000);
  EXPECT_DOUBLE_EQ(frames.mean, 900);
  EXPECT_EQ(frames.count, 3);
  const Spread efficiency = p.efficiency();
  EXPECT_DOUBLE_EQ(efficiency.min, 0.8);
  EXPECT_DOUBLE_EQ(efficiency.max, 1.0);
}

TEST(Sweep, RecommendsOnlyBeyondTheSpread) {
  // Overlapping: 8 is faster on average but its slowest repeat is below 4's fastest.
  const auto overlapping = recommend({point("4", {900, 1000, 950}, 1000), point("8", {950, 1200, 1100}, 1200)});
  EXPECT_FALSE(overlapping.made);
  EXPECT_NE(overlapping.reason.find("within the run-to-run spread"), std::string::npos) << overlapping.reason;

  const auto clear = recommend({point("4", {900, 1000, 950}, 1000), point("8", {1100, 1200, 1150}, 1200)});
  ASSERT_TRUE(clear.made) << clear.reason;
  EXPECT_EQ(clear.best, 1);
  EXPECT_EQ(clear.yaml, "train:\n  batch_size: 8\n");

  // Two runs a point are too few to trust a spread, however clear the gap looks.
  const auto twice = recommend({point("4", {900, 1000}, 1000), point("8", {1100, 1200}, 1200)});
  EXPECT_FALSE(twice.made);
  EXPECT_NE(twice.reason.find("train.batch_size=4 has 2 successful run(s)"), std::string::npos) << twice.reason;
  EXPECT_NE(twice.reason.find("--repeat 3"), std::string::npos);

  PointResult failed = point("16", {}, 0);
  const auto single = recommend({point("4", {900, 1000, 950}, 1000), failed});
  EXPECT_FALSE(single.made);
  EXPECT_EQ(single.reason, "only one point measured: nothing to compare");
}

TEST(Sweep, YamlGroupsSettingsBySection) {
  EXPECT_EQ(yaml_snippet({{"train.batch_size", "16"}, {"roles.data_per_node", "2"}, {"train.credits", "3"}}),
            "train:\n  batch_size: 16\n  credits: 3\nroles:\n  data_per_node: 2\n");
}

TEST(Sweep, TheTableShowsRangesAndDashesForMissingMemory) {
  const std::string table = format_table({point("8", {900, 1000}, 1000)});
  EXPECT_NE(table.find("900-1000"), std::string::npos) << table;
  EXPECT_NE(table.find("0.900-1.000"), std::string::npos) << table;
  EXPECT_NE(table.find("  2/2 "), std::string::npos) << table;
  EXPECT_NE(table.find(" -\n"), std::string::npos) << table;  // peak RSS absent
}

}  // namespace
}  // namespace sluice::benchmark
