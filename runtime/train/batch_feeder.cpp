#include "runtime/train/batch_feeder.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/stop_signal.h"
#include "runtime/train/batch_assembler.h"
#include "runtime/train/progress_watchdog.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {

// Task t is global step first_step + t / targets for target t % targets: a step's batches go
// out target by target, steps in order.
struct BatchFeeder::Tasks {
  int64_t first_step;
  int64_t end_step;
  const std::vector<FeedTarget>& targets;

  int64_t count() const { return (end_step - first_step) * per_step(); }
  int64_t per_step() const { return static_cast<int64_t>(targets.size()); }
  int64_t global(int64_t task) const { return first_step + task / per_step(); }
  const FeedTarget& target(int64_t task) const { return targets[static_cast<size_t>(task % per_step())]; }
};

// A ring of `window` batches between the reader threads and the sender: task t's batch waits
// in ready[t % window]. A reader takes task t only while t < sent + window, so no batch is
// overwritten before the sender took it. stop() (or a reader's failure) wakes every waiter.
class BatchFeeder::ReadAhead {
 public:
  ReadAhead(int64_t tasks, size_t window) : tasks_(tasks), ready_(window) {}

  // Reader: the next task to collate; nullopt once the feed stops or every task is taken.
  // Blocks while the window is full.
  std::optional<int64_t> next_task() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return stopping_ || next_task_ >= tasks_ || next_task_ < sent_ + window(); });
    if (stopping_ || next_task_ >= tasks_) return std::nullopt;
    return next_task_++;
  }

  void put(int64_t task, BatchBytes&& bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Move construction keeps the batch in its memory resource (no copy).
      ready_[static_cast<size_t>(task % window())].emplace(std::move(bytes));
    }
    changed_.notify_all();
  }

  // Sender: task's batch once collated, and in `queued` the batches then waiting; nullopt when
  // the feed stopped (a reader failed).
  std::optional<BatchBytes> take(int64_t task, int64_t& queued) {
    std::optional<BatchBytes> taken;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto& slot = ready_[static_cast<size_t>(task % window())];
      changed_.wait(lock, [&] { return stopping_ || slot.has_value(); });
      if (!slot.has_value()) return std::nullopt;
      taken.emplace(std::move(*slot));
      slot.reset();
      ++sent_;
      queued = 0;
      for (const auto& batch : ready_) queued += batch.has_value() ? 1 : 0;
    }
    changed_.notify_all();
    return taken;
  }

  // A reader failed: the first error is kept and the feed stops.
  void fail(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(error);
    stopping_ = true;
  }

  // A reader ends: its time reading and collating.
  void add_times(double read_s, double collate_s) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      read_s_ += read_s;
      collate_s_ += collate_s;
    }
    changed_.notify_all();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
  }

  // After every reader joined:
  std::exception_ptr error() const { return error_; }
  double read_s() const { return read_s_; }
  double collate_s() const { return collate_s_; }

 private:
  int64_t window() const { return static_cast<int64_t>(ready_.size()); }

  const int64_t tasks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::optional<BatchBytes>> ready_;
  int64_t next_task_ = 0, sent_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  double read_s_ = 0, collate_s_ = 0;
};

namespace {

// One send() both waits for a credit and moves the bytes; the channel's own clocks split the
// call into the two spans the report tells apart.
void record_send_spans(const FeedTarget& target, int64_t global, const transport::ChannelStats& before,
                       const transport::ChannelStats& after, int64_t send_start, int64_t send_end,
                       size_t bytes) {
  auto& recorder = timing::SpanRecorder::global();
  const auto credit_ns =
      std::min<int64_t>(send_end - send_start, static_cast<int64_t>((after.wait_s - before.wait_s) * 1e9));
  timing::Span span;
  span.step = global;
  span.peer = target.rank;
  span.sequence = static_cast<int64_t>(before.batches);
  span.stage = timing::Stage::credit_wait;
  span.start_ns = send_start;
  span.end_ns = send_start + credit_ns;
  recorder.record(span);
  span.stage = timing::Stage::send;
  span.start_ns = span.end_ns;
  span.end_ns = send_end;
  span.bytes = static_cast<int64_t>(bytes);
  recorder.record(span);
}

}  // namespace

BatchFeeder::BatchFeeder(cache::CacheReader& reader, const PlanSchedule& schedule, FeedOptions options)
    : reader_(reader), schedule_(schedule), options_(std::move(options)) {
  options_.reader_threads = std::max(1, options_.reader_threads);
  options_.read_ahead = std::max(1, options_.read_ahead);
}

FeedStats BatchFeeder::run(int64_t first_step, int64_t end_step, const std::vector<FeedTarget>& targets) {
  const auto started = Clock::now();
  const Tasks tasks{first_step, end_step, targets};
  ReadAhead ahead(tasks.count(), static_cast<size_t>(options_.read_ahead) * targets.size());
  const uint16_t queue_depth = timing::SpanRecorder::global().counter("queue_depth");
  std::vector<std::thread> readers;
  for (int i = 0; i < options_.reader_threads; ++i) {
    readers.emplace_back([this, i, &tasks, &ahead] { collate_ahead(i, tasks, ahead); });
  }
  const auto stop = [&] {
    ahead.stop();
    for (auto& thread : readers) thread.join();
  };
  FeedStats stats;
  try {
    stats = send_all(tasks, ahead, queue_depth);
  } catch (...) {
    stop();
    throw;
  }
  stop();
  if (ahead.error()) std::rethrow_exception(ahead.error());
  for (const auto& target : targets) target.channel->close();
  stats.read_s = ahead.read_s();
  stats.collate_s = ahead.collate_s();
  stats.wall_s = seconds_since(started);
  return stats;
}

void BatchFeeder::collate_ahead(int reader_index, const Tasks& tasks, ReadAhead& ahead) {
  timing::SpanRecorder::global().name_this_thread("reader " + std::to_string(reader_index));
  const timing::InjectedDelay& delay = options_.delay;
  BatchAssembler assembler(reader_);
  BatchBytes bytes(options_.batch_memory);
  double read_s = 0, collate_s = 0;
  try {
    while (const std::optional<int64_t> task = ahead.next_task()) {
      const int64_t global = tasks.global(*task);
      const FeedTarget& target = tasks.target(*task);
      const ScheduledBatch scheduled = schedule_.batch(global, target.model_index);
      auto start = Clock::now();
      {
        timing::ScopedSpan span(timing::Stage::cache_read, global, target.rank);
        assembler.read(scheduled.batch->samples);
        delay.apply(timing::Stage::cache_read, options_.rank, global);
      }
      read_s += seconds_since(start);
      start = Clock::now();
      {
        timing::ScopedSpan span(timing::Stage::collate, global, target.rank);
        assembler.collate(scheduled, bytes);
        if (options_.work != nullptr) options_.work->on_collated(bytes, global);
        delay.apply(timing::Stage::collate, options_.rank, global);
        span.set_bytes(static_cast<int64_t>(bytes.size()));
      }
      collate_s += seconds_since(start);
      ahead.put(*task, std::move(bytes));
      bytes = BatchBytes(options_.batch_memory);
    }
  } catch (...) {
    ahead.fail(std::current_exception());
  }
  ahead.add_times(read_s, collate_s);
}

FeedStats BatchFeeder::send_all(const Tasks& tasks, ReadAhead& ahead, uint16_t queue_depth_counter) {
  FeedStats stats;
  for (int64_t task = 0; task < tasks.count(); ++task) {
    const int64_t global = tasks.global(task);
    const FeedTarget& target = tasks.target(task);
    const auto wait_start = Clock::now();
    int64_t queued = 0;
    std::optional<BatchBytes> bytes;
    {
      timing::ScopedSpan span(timing::Stage::wait_for_reader, global, target.rank);
      bytes = ahead.take(task, queued);
    }
    if (!bytes) break;  // a reader failed: run() rethrows its error
    timing::SpanRecorder::global().count(queue_depth_counter, static_cast<double>(queued));
    stats.wait_s += seconds_since(wait_start);
    send(target, global, *bytes, stats);
    if (options_.after_send) options_.after_send(global);
  }
  return stats;
}

void BatchFeeder::send(const FeedTarget& target, int64_t global, BatchBytes& bytes, FeedStats& stats) {
  // A stop signal that reached this data rank travels to its model rank with the batch, which
  // stops the run at the model ranks' next agreement (batch_buffer.h, data_rank_stop).
  if (stop_requested()) reinterpret_cast<BatchHeader*>(bytes.data())->data_rank_stop = 1;
  const void* payload = bytes.data();
  if (options_.work != nullptr) {
    const auto device_start = Clock::now();
    if (const void* moved = options_.work->to_send(bytes, global, target.rank); moved != nullptr) {
      payload = moved;
      stats.device_s += seconds_since(device_start);
    }
  }
  const auto wait_start = Clock::now();
  last_target_rank_ = target.rank;
  const transport::ChannelStats before = target.channel->stats();
  const int64_t send_start = timing::now_ns();
  {
    // Waits for a free slot of the model rank (a credit): that rank's time, not this one's.
    const ProgressWatchdog::PeerWait waiting_on_model_rank({target.rank}, "a free slot (credit) of its model rank");
    target.channel->send(payload, bytes.size());
  }
  options_.delay.apply(timing::Stage::send, options_.rank, global);
  const int64_t send_end = timing::now_ns();
  record_send_spans(target, global, before, target.channel->stats(), send_start, send_end, bytes.size());
  stats.wait_s += seconds_since(wait_start);
  ++stats.batches;
  stats.bytes += static_cast<int64_t>(bytes.size());
}

}  // namespace sluice::runtime
