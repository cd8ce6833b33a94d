#include "timing/span_recorder.h"

#include <thread>

#include <gtest/gtest.h>

namespace sluice::timing {
namespace {

// Each test uses its own recorder: lanes are per (thread, recorder).
TEST(SpanRecorder, ThreadsGetTheirOwnNamedLanes) {
  SpanRecorder recorder;
  recorder.name_this_thread("main");
  Span span;
  span.stage = Stage::forward;
  span.start_ns = 10;
  span.end_ns = 20;
  recorder.record(span);
  std::thread reader([&] {
    recorder.name_this_thread("reader 0");
    Span read;
    read.stage = Stage::cache_read;
    read.start_ns = 5;
    read.end_ns = 7;
    read.bytes = 4096;
    recorder.record(read);
  });
  reader.join();
  const auto snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.lanes.size(), 2u);
  EXPECT_EQ(snapshot.lanes[0], "main");
  EXPECT_EQ(snapshot.lanes[1], "reader 0");
  ASSERT_EQ(snapshot.spans.size(), 2u);
  // Sorted by start: the reader's span first, on its lane.
  EXPECT_EQ(snapshot.spans[0].stage, Stage::cache_read);
  EXPECT_EQ(snapshot.spans[0].lane, 1);
  EXPECT_EQ(snapshot.spans[0].bytes, 4096);
  EXPECT_EQ(snapshot.spans[1].lane, 0);
  EXPECT_EQ(snapshot.dropped_spans, 0u);
}

TEST(SpanRecorder, AFullRingKeepsTheNewestSpansAndCountsTheDropped) {
  SpanRecorder recorder;
  recorder.set_capacity(4);
  for (int i = 0; i < 10; ++i) {
    Span span;
    span.start_ns = i;
    span.end_ns = i + 1;
    span.step = i;
    recorder.record(span);
  }
  const auto snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.spans.size(), 4u);
  EXPECT_EQ(snapshot.dropped_spans, 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(snapshot.spans[static_cast<size_t>(i)].step, 6 + i);
}

TEST(SpanRecorder, DisabledRecordsNothing) {
  SpanRecorder recorder;
  recorder.set_enabled(false);
  recorder.record(Span{});
  recorder.count(recorder.counter("queue_depth"), 3);
  EXPECT_TRUE(recorder.snapshot().spans.empty());
  EXPECT_TRUE(recorder.snapshot().counters.empty());
}

TEST(SpanRecorder, NamedLanesAndCounters) {
  SpanRecorder recorder;
  const uint16_t allreduce = recorder.named_lane("allreduce");
  EXPECT_EQ(recorder.named_lane("allreduce"), allreduce);
  Span span;
  span.stage = Stage::allreduce_overlapped;
  span.start_ns = 1;
  span.end_ns = 2;
  recorder.record_on(allreduce, span);
  const uint16_t queue_depth = recorder.counter("queue_depth");
  const uint16_t credits = recorder.counter("credits");
  EXPECT_EQ(recorder.counter("queue_depth"), queue_depth);
  recorder.count(queue_depth, 2);
  recorder.count(credits, 3);
  recorder.count(queue_depth, 1);
  const auto snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.spans.size(), 1u);
  EXPECT_EQ(snapshot.lanes[snapshot.spans[0].lane], "allreduce");
  ASSERT_EQ(snapshot.counter_names.size(), 2u);
  ASSERT_EQ(snapshot.counters.size(), 3u);
  EXPECT_EQ(snapshot.counter_names[snapshot.counters[0].counter], "queue_depth");
  EXPECT_EQ(snapshot.counters[0].value, 2);
  EXPECT_EQ(snapshot.counter_names[snapshot.counters[1].counter], "credits");
  EXPECT_EQ(snapshot.counters[2].value, 1);
}

TEST(ScopedSpan, RecordsItsLifetimeOnTheGlobalRecorder) {
  auto& recorder = SpanRecorder::global();
  recorder.clear();
  const int64_t before = now_ns();
  {
    ScopedSpan span(Stage::collate, 42, 3, 100, 7);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int64_t after = now_ns();
  const auto snapshot = recorder.snapshot();
  ASSERT_EQ(snapshot.spans.size(), 1u);
  const Span& s = snapshot.spans[0];
  EXPECT_EQ(s.stage, Stage::collate);
  EXPECT_EQ(s.step, 42);
  EXPECT_EQ(s.peer, 3);
  EXPECT_EQ(s.bytes, 100);
  EXPECT_EQ(s.sequence, 7);
  EXPECT_GE(s.start_ns, before);
  EXPECT_LE(s.end_ns, after);
  EXPECT_GE(s.end_ns - s.start_ns, 2'000'000);
  recorder.clear();
}

TEST(Stage, NamesRoundTrip) {
  for (int i = 0; i < stage_count; ++i) {
    const auto stage = static_cast<Stage>(i);
    EXPECT_EQ(stage_from_string(to_string(stage)), stage) << to_string(stage);
  }
  EXPECT_FALSE(stage_from_string("cache_reed").has_value());
}

}  // namespace
}  // namespace sluice::timing
