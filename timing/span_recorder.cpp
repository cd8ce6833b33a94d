#include "timing/span_recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <sys/syscall.h>
#include <unistd.h>

namespace sluice::timing {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct SpanRecorder::Lane {
  uint16_t id = 0;
  std::string name;
  int thread_id = 0;        // the kernel thread id of a thread's lane; 0 for named_lane()
  mutable std::mutex mutex;
  std::vector<Span> spans;  // ring of `capacity` spans once full
  size_t capacity = 0;
  uint64_t written = 0;     // spans ever recorded; written - capacity were overwritten
  std::vector<CounterSample> counters;
  uint64_t counters_written = 0;
};

SpanRecorder::SpanRecorder() {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id++;
}

SpanRecorder::~SpanRecorder() = default;

SpanRecorder& SpanRecorder::global() {
  static SpanRecorder recorder;
  return recorder;
}

SpanRecorder::Lane& SpanRecorder::this_thread_lane() {
  // One lane per (thread, recorder). Lanes outlive their threads: their spans are still wanted.
  thread_local std::vector<std::pair<uint64_t, Lane*>> mine;
  for (const auto& [recorder, lane] : mine) {
    if (recorder == id_) return *lane;
  }
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  Lane& lane = new_lane_locked("thread " + std::to_string(lanes_.size()));
  lane.thread_id = static_cast<int>(::syscall(SYS_gettid));  // CpuWatch reads its CPU time
  mine.emplace_back(id_, &lane);
  return lane;
}

SpanRecorder::Lane& SpanRecorder::new_lane_locked(const std::string& name) {
  auto lane = std::make_unique<Lane>();
  lane->id = static_cast<uint16_t>(lanes_.size());
  lane->name = name;
  lane->capacity = std::max<size_t>(1, capacity_);
  lane->spans.reserve(std::min<size_t>(lane->capacity, 4096));
  lanes_.push_back(std::move(lane));
  return *lanes_.back();
}

uint16_t SpanRecorder::named_lane(const std::string& name) {
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  for (const auto& lane : lanes_) {
    if (lane->name == name) return lane->id;
  }
  return new_lane_locked(name).id;
}

void SpanRecorder::append(Lane& lane, const Span& span) {
  std::lock_guard<std::mutex> lock(lane.mutex);
  if (lane.spans.size() < lane.capacity) {
    lane.spans.push_back(span);
  } else {
    lane.spans[lane.written % lane.capacity] = span;
  }
  ++lane.written;
}

void SpanRecorder::record_on(uint16_t lane, Span span) {
  if (!enabled_) return;
  Lane* target = nullptr;
  {
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    if (lane >= lanes_.size()) return;
    target = lanes_[lane].get();
  }
  span.lane = lane;
  append(*target, span);
}

void SpanRecorder::name_this_thread(const std::string& name) {
  Lane& lane = this_thread_lane();
  std::lock_guard<std::mutex> lock(lane.mutex);
  lane.name = name;
}

void SpanRecorder::record(Span span) {
  if (!enabled_) return;
  Lane& lane = this_thread_lane();
  span.lane = lane.id;
  append(lane, span);
}

uint16_t SpanRecorder::counter(std::string_view name) {
  std::lock_guard<std::mutex> lock(lanes_mutex_);
  const auto id = static_cast<uint16_t>(
      std::find(counter_names_.begin(), counter_names_.end(), name) - counter_names_.begin());
  if (id == counter_names_.size()) counter_names_.emplace_back(name);
  return id;
}

void SpanRecorder::count(uint16_t counter, double value) {
  if (!enabled_) return;
  Lane& lane = this_thread_lane();
  const CounterSample sample{now_ns(), value, counter, lane.id};
  std::lock_guard<std::mutex> lock(lane.mutex);
  if (lane.counters.size() < lane.capacity) {
    lane.counters.push_back(sample);
  } else {
    lane.counters[lane.counters_written % lane.capacity] = sample;
  }
  ++lane.counters_written;
}

SpanRecorder::Snapshot SpanRecorder::snapshot() const {
  Snapshot snapshot;
  std::lock_guard<std::mutex> lanes_lock(lanes_mutex_);
  snapshot.counter_names = counter_names_;
  for (const auto& lane : lanes_) {
    std::lock_guard<std::mutex> lock(lane->mutex);
    snapshot.lanes.push_back(lane->name);
    snapshot.lane_threads.emplace_back(lane->name, lane->thread_id);
    snapshot.spans.insert(snapshot.spans.end(), lane->spans.begin(), lane->spans.end());
    snapshot.counters.insert(snapshot.counters.end(), lane->counters.begin(), lane->counters.end());
    if (lane->written > lane->capacity) snapshot.dropped_spans += lane->written - lane->capacity;
  }
  std::sort(snapshot.spans.begin(), snapshot.spans.end(),
            [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  std::sort(snapshot.counters.begin(), snapshot.counters.end(),
            [](const CounterSample& a, const CounterSample& b) { return a.t_ns < b.t_ns; });
  return snapshot;
}

void SpanRecorder::clear() {
  std::lock_guard<std::mutex> lanes_lock(lanes_mutex_);
  for (const auto& lane : lanes_) {
    std::lock_guard<std::mutex> lock(lane->mutex);
    lane->spans.clear();
    lane->counters.clear();
    lane->written = 0;
    lane->counters_written = 0;
  }
}

ScopedSpan::ScopedSpan(Stage stage, int64_t step, int32_t peer, int64_t bytes, int64_t sequence) {
  span_.stage = stage;
  span_.step = step;
  span_.peer = peer;
  span_.bytes = bytes;
  span_.sequence = sequence;
  span_.start_ns = now_ns();
}

ScopedSpan::~ScopedSpan() {
  span_.end_ns = now_ns();
  SpanRecorder::global().record(span_);
}

}  // namespace sluice::timing
