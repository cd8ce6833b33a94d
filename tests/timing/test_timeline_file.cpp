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

// read_timeline (simdjson) must give what the nlohmann reader gives, member for member.
TEST(TimelineFile, TheFileReaderAgreesWithFromJsonOnEveryField) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-timeline-reader-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RankTimeline t = example();
  t.feeds = {3, 4};
  t.counters.push_back({8000, 0.25, 0, 1});
  t.injected_delay = {{"stage", "forward"}, {"seconds", 0.5}, {"ranks", {2}}};
  t.set_resources({{"cpu_seconds", 1.5},
                   {"stalls", {{100, 200}, {300, 450}}},
                   {"quota", nullptr},
                   {"storage_reads",
                    {{"read_bytes", 4096}, {"intervals", {{10, 20, 4096, 7}}}, {"intervals_dropped", 0}}}});
  t.summary = {{"steps", 13}, {"loss", 0.125}, {"name", "q\"uote"}, {"big", uint64_t{1} << 63}};
  write_timeline(dir, t);
  const RankTimeline read = read_timeline(timeline_path(dir, t.rank));
  EXPECT_EQ(read.to_json(), RankTimeline::from_json(t.to_json(), "x").to_json());
  EXPECT_EQ(read.to_json().dump(), t.to_json().dump());
  // The long lists of resources are read into the timeline's vectors, the rest stays in `resources`.
  EXPECT_EQ(read.stalls, (std::vector<std::pair<int64_t, int64_t>>{{100, 200}, {300, 450}}));
  EXPECT_EQ(read.storage_reads, (std::vector<std::array<int64_t, 4>>{{10, 20, 4096, 7}}));
  EXPECT_FALSE(read.resources.contains("stalls"));
  EXPECT_FALSE(read.resources["storage_reads"].contains("intervals"));
  EXPECT_EQ(read.resources["storage_reads"]["read_bytes"], 4096);
  EXPECT_EQ(read.to_json()["resources"]["stalls"], nlohmann::json({{100, 200}, {300, 450}}));
  ASSERT_EQ(read.spans.size(), 2u);
  EXPECT_EQ(read.spans[1].stage, Stage::allreduce_overlapped);
  EXPECT_EQ(read.spans[1].lane, 1);
  EXPECT_EQ(read.counters[1].value, 0.25);
  fs::remove_all(dir);
}

// Each way a file can be wrong is a DataError that names the file and says what is wrong.
TEST(TimelineFile, TheFileReaderNamesWhatIsWrong) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-timeline-wrong-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "timeline");
  const fs::path file = dir / "timeline" / "rank-1.json";
  const std::string good = example().to_json().dump();
  const auto error_of = [&](const std::string& text) {
    std::ofstream(file, std::ios::trunc) << text;
    try {
      read_timeline(file);
    } catch (const DataError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  EXPECT_NE(error_of(good.substr(0, good.size() / 2)).find(file.string() + ": not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(replaced("\"rank\":2", "\"rank\":\"two\"")).find("malformed timeline"), std::string::npos);
  // The member of the wrong type is named (issue 27: a timeline of another schema failed without it).
  EXPECT_NE(error_of(replaced("\"rank\":2", "\"rank\":\"two\"")).find("its member 'rank'"), std::string::npos);
  EXPECT_NE(error_of(replaced("\"host\":\"node07\",", "")).find("no 'host' member"), std::string::npos);
  EXPECT_NE(error_of(replaced("[0,7,5000", "[0,99,5000")).find("names stage index 99"), std::string::npos);
  EXPECT_NE(error_of(replaced("\"batch_wait\"", "\"no_such_stage\"")).find("unknown stage 'no_such_stage'"),
            std::string::npos);
  EXPECT_NE(error_of(replaced("sluice-timeline/1", "other/1")).find("not a sluice timeline"), std::string::npos);
  EXPECT_EQ(error_of(good), "no error");
  // A stall interval that is not two integers.
  RankTimeline with_stalls = example();
  with_stalls.set_resources({{"stalls", {{100, 200}}}});
  const std::string stalls_text = with_stalls.to_json().dump();
  const size_t at = stalls_text.find("[[100,200]]");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(error_of(std::string(stalls_text).replace(at, 11, "[[100,\"x\"]]")).find("malformed timeline"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(stalls_text).replace(at, 11, "[[100]]")).find("malformed timeline"),
            std::string::npos);
  fs::remove_all(dir);
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
