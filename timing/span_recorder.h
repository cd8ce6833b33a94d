#pragma once
// What a rank records about its own time: spans (a stage, its start and end, and the step, bytes
// and peer it concerns) and counter samples (queue depth, credits), in per-thread ring buffers.
//
// Hot path: a thread appends to its own lane under that lane's mutex, which no other thread
// takes until snapshot(); so recording costs a clock read and an uncontended lock (tens of ns),
// far below the 1% of step time allowed (bench/timing measures it). A full ring overwrites its
// oldest spans and counts them as dropped: a long run keeps its most recent spans.
//
// Clock: now_ns() is CLOCK_MONOTONIC (std::chrono::steady_clock on Linux), shared by every
// process on a host. Aligning hosts to rank 0 is clock_sync.h's job; spans stay in local time.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "timing/stage.h"

namespace sluice::timing {

int64_t now_ns();

struct Span {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t step = -1;      // global step (train) or corpus row (prep); -1 when none
  int64_t bytes = 0;      // bytes moved or produced, when meaningful
  int64_t sequence = -1;  // channel sequence number of a send / batch_wait (flow id with the rank pair)
  int32_t peer = -1;      // the other rank of a send, credit_wait or batch_wait
  Stage stage = Stage::cache_read;
  uint16_t lane = 0;      // filled in by the recorder
};

struct CounterSample {
  int64_t t_ns = 0;
  double value = 0;
  uint16_t counter = 0;  // index into Snapshot::counter_names
  uint16_t lane = 0;
};

class SpanRecorder {
 public:
  // The process's recorder. Disabled recorders drop every call at the cost of one load.
  static SpanRecorder& global();
  SpanRecorder();  // more than one: tests and benchmarks
  ~SpanRecorder();
  SpanRecorder(const SpanRecorder&) = delete;
  SpanRecorder& operator=(const SpanRecorder&) = delete;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  // Spans kept per thread (the ring size); applies to lanes created afterwards.
  void set_capacity(size_t spans_per_lane) { capacity_ = spans_per_lane; }

  // Names the calling thread's lane ("main", "reader 1"). A thread that records without a name
  // gets "thread N".
  void name_this_thread(const std::string& name);
  void record(Span span);
  // A lane not tied to a thread, e.g. "allreduce" for collectives in flight while the main thread
  // computes; returns its id (the same id for the same name). record_on() may be called from any
  // thread.
  uint16_t named_lane(const std::string& name);
  void record_on(uint16_t lane, Span span);
  // The id of counter `name` (e.g. "queue_depth"), registered on first use: look it up once,
  // outside the loop that samples it.
  uint16_t counter(std::string_view name);
  // A sample of `counter` taken now on the calling thread.
  void count(uint16_t counter, double value);

  struct Snapshot {
    std::vector<std::string> lanes;          // index = lane id
    // (lane name, kernel thread id) per lane; 0 for lanes not tied to a thread (named_lane).
    std::vector<std::pair<std::string, int>> lane_threads;
    std::vector<Span> spans;                 // every lane's, sorted by start
    std::vector<std::string> counter_names;  // index = CounterSample::counter
    std::vector<CounterSample> counters;     // sorted by time
    uint64_t dropped_spans = 0;
  };
  // Safe to call while other threads record (each lane is copied under its own lock).
  Snapshot snapshot() const;
  // Forgets everything recorded (tests and benchmarks).
  void clear();

 private:
  struct Lane;
  Lane& this_thread_lane();
  Lane& new_lane_locked(const std::string& name);  // lanes_mutex_ held
  static void append(Lane& lane, const Span& span);

  uint64_t id_;  // keys the per-thread lane cache (an address could be reused by a later recorder)
  bool enabled_ = true;
  size_t capacity_ = size_t{1} << 16;
  mutable std::mutex lanes_mutex_;  // guards lanes_ and counter_names_
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<std::string> counter_names_;
};

// Records [construction, destruction) as one span on the calling thread.
class ScopedSpan {
 public:
  explicit ScopedSpan(Stage stage, int64_t step = -1, int32_t peer = -1, int64_t bytes = 0,
                      int64_t sequence = -1);
  ~ScopedSpan();
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  void set_bytes(int64_t bytes) { span_.bytes = bytes; }

 private:
  Span span_;
};

}  // namespace sluice::timing
