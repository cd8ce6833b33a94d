#include "timing/timeline_file.h"

#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"

namespace sluice::timing {
namespace {

namespace fs = std::filesystem;

RankTimeline example() {
  RankTimeline t;
  t.rank = 2;
  t.world_size = 3;
  t.host = "node07";
  t.gpu = 1;
  t.role = "model";
  t.fed_by = 0;
  t.status = "failed";
  t.error = "timed out";
  t.waiting_for = 0;
  t.clock.start = {1000, 250, 40, 80, 29};
  finish_alignment(t.clock, ClockEstimate{1'000'001'000, 1250, 50, 100, 29});
  t.lanes = {"main", "allreduce"};
  Span span;
  span.stage = Stage::batch_wait;
  span.start_ns = 5000;
  span.end_ns = 9000;
  span.step = 12;
  span.bytes = 65536;
  span.peer = 0;
  span.sequence = 12;
  span.lane = 0;
  t.spans.push_back(span);
  span.stage = Stage::allreduce_overlapped;
  span.lane = 1;
  t.spans.push_back(span);
  t.counter_names = {"queue_depth"};
  t.counters.push_back({7000, 2.0, 0, 0});
  t.dropped_spans = 3;
  t.channels = nlohmann::json::array({{{"name", "feed rank 0 -> rank 2"}, {"batches", 13}}});
  t.settings = {{"train.checkpoint_every", 200}};
  t.summary = {{"steps", 13}};
  return t;
}

TEST(TimelineFile, RoundTripsEveryField) {
  const RankTimeline t = example();
  const RankTimeline back = RankTimeline::from_json(nlohmann::json::parse(t.to_json().dump()), "x");
  EXPECT_EQ(back.to_json(), t.to_json());
  EXPECT_EQ(back.spans[1].stage, Stage::allreduce_overlapped);
  EXPECT_EQ(back.clock.end->offset_ns, 1250);
}

TEST(ClockAlignment, DriftMapsLocalTimeOntoTheReference) {
  const RankTimeline t = example();
  // offset 250 ns at local 1000, 1250 ns one second later: drift 1e-6.
  EXPECT_NEAR(t.clock.drift, 1e-6, 1e-12);
  EXPECT_EQ(t.clock.to_reference(1000), 750);
  EXPECT_EQ(t.clock.to_reference(1'000'001'000), 1'000'001'000 - 1250);
  EXPECT_EQ(t.clock.uncertainty_ns(), 50);
}

TEST(TimelineFile, WritesAndReadsARunDirectory) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-timeline-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RankTimeline a = example();
  RankTimeline b = example();
  b.rank = 0;
  write_timeline(dir, a);
  write_timeline(dir, b);
  const auto all = read_timelines(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].rank, 0);
  EXPECT_EQ(all[1].rank, 2);
  EXPECT_TRUE(read_timelines(dir / "nothing-here").empty());
  fs::remove_all(dir);
}

TEST(TimelineFile, AMalformedFileIsNamed) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-timeline-bad-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "timeline");
  std::ofstream(dir / "timeline" / "rank-1.json") << "{\"format\": \"sluice-timeline/1\", \"spans\": [";
  try {
    read_timelines(dir);
    FAIL() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("rank-1.json"), std::string::npos) << error.what();
  }
  std::ofstream(dir / "timeline" / "rank-1.json") << "{\"format\": \"other\"}";
  EXPECT_THROW(read_timelines(dir), DataError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::timing
