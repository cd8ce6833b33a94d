#include "runtime/train/batch_feeder.h"

#include <chrono>
#include <condition_variable>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "runtime/train/batch_buffer.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {
namespace {



}  // namespace

PlanSchedule::PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks)
    : train_(std::move(train)), config_(std::move(config)), model_ranks_(model_ranks) {
  auto first = std::make_shared<const BatchPlan>(BatchPlan::build(train_, config_, model_ranks_, 0));
  steps_per_epoch_ = first->steps();
  recent_.push_back(std::move(first));
}

std::shared_ptr<const BatchPlan> PlanSchedule::epoch(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& plan : recent_) {
    if (plan->epoch() == epoch) return plan;
  }
  auto plan = std::make_shared<const BatchPlan>(BatchPlan::build(train_, config_, model_ranks_, epoch));
  // Workers run at most a few batches ahead, so two or three epochs are ever in use at once.
  if (recent_.size() >= 4) recent_.erase(recent_.begin());
  recent_.push_back(plan);
  return plan;
}

PlanPosition PlanSchedule::position(int64_t global_step) const {
  return PlanPosition{global_step / steps_per_epoch_, global_step % steps_per_epoch_};
}

BatchFeeder::BatchFeeder(cache::CacheReader& reader, const PlanSchedule& schedule, FeedOptions options)
    : reader_(reader), schedule_(schedule), options_(std::move(options)) {
  options_.reader_threads = std::max(1, options_.reader_threads);
  options_.read_ahead = std::max(1, options_.read_ahead);
}

FeedStats BatchFeeder::run(int64_t first_step, int64_t end_step, const std::vector<FeedTarget>& targets) {
  const auto started = Clock::now();
  const int32_t n_mels = reader_.n_mels();
  const int64_t per_step = static_cast<int64_t>(targets.size());
  const int64_t tasks = (end_step - first_step) * per_step;  // task t: step first + t / per_step
  const size_t window = static_cast<size_t>(options_.read_ahead) * targets.size();
  auto& recorder = timing::SpanRecorder::global();
  const timing::InjectedDelay& delay = options_.delay;
  const int rank = options_.rank;
  const uint16_t queue_depth = recorder.counter("queue_depth");

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::optional<BatchBytes>> ready(window);
  int64_t next_task = 0, sent = 0;
  bool stopping = false;
  std::exception_ptr error;
  double read_s = 0, collate_s = 0;

  auto worker = [&](int index) {
    recorder.name_this_thread("reader " + std::to_string(index));
    std::vector<cache::Sample> samples;
    BatchBytes bytes(options_.batch_memory);
    double my_read = 0, my_collate = 0;
    try {
      while (true) {
        int64_t task;
        {
          std::unique_lock<std::mutex> lock(mutex);
          changed.wait(lock, [&] { return stopping || next_task >= tasks || next_task < sent + int64_t(window); });
          if (stopping || next_task >= tasks) break;
          task = next_task++;
        }
        const int64_t global = first_step + task / per_step;
        const FeedTarget& target = targets[static_cast<size_t>(task % per_step)];
        const PlanPosition at = schedule_.position(global);
        const auto plan = schedule_.epoch(at.epoch);
        const PlannedBatch& planned = plan->batch(at.step, target.model_index);
        auto start = Clock::now();
        {
          timing::ScopedSpan span(timing::Stage::cache_read, global, target.rank);
          reader_.read_batch(planned.samples, samples);
          delay.apply(timing::Stage::cache_read, rank, global);
        }
        my_read += seconds_since(start);
        start = Clock::now();
        {
          timing::ScopedSpan span(timing::Stage::collate, global, target.rank);
          collate(samples, plan->buckets()[static_cast<size_t>(planned.bucket)], n_mels, at.epoch, at.step,
                  planned.bucket, bytes);
          if (options_.on_collated) options_.on_collated(bytes, global);
          delay.apply(timing::Stage::collate, rank, global);
          span.set_bytes(static_cast<int64_t>(bytes.size()));
        }
        my_collate += seconds_since(start);
        {
          std::lock_guard<std::mutex> lock(mutex);
          // Move construction keeps the batch in its memory resource (no copy).
          ready[static_cast<size_t>(task) % window].emplace(std::move(bytes));
        }
        bytes = BatchBytes(options_.batch_memory);
        changed.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      stopping = true;
    }
    std::lock_guard<std::mutex> lock(mutex);
    read_s += my_read;
    collate_s += my_collate;
    changed.notify_all();
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < options_.reader_threads; ++i) threads.emplace_back(worker, i);
  FeedStats stats;
  auto stop = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    for (auto& thread : threads) thread.join();
  };
  try {
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t global = first_step + task / per_step;
      const FeedTarget& target = targets[static_cast<size_t>(task % per_step)];
      std::optional<BatchBytes> taken;
      auto wait_start = Clock::now();
      int64_t queued = 0;
      {
        timing::ScopedSpan span(timing::Stage::wait_for_reader, global, target.rank);
        std::unique_lock<std::mutex> lock(mutex);
        auto& slot = ready[static_cast<size_t>(task) % window];
        changed.wait(lock, [&] { return stopping || slot.has_value(); });
        if (!slot.has_value()) break;  // a worker failed
        taken.emplace(std::move(*slot));
        slot.reset();
        ++sent;
        for (const auto& batch : ready) queued += batch.has_value() ? 1 : 0;
      }
      changed.notify_all();
      const BatchBytes& bytes = *taken;
      recorder.count(queue_depth, static_cast<double>(queued));
      stats.wait_s += seconds_since(wait_start);
      const void* payload = bytes.data();
      if (options_.to_send) {
        const auto device_start = Clock::now();
        payload = options_.to_send(bytes, global, target.rank);
        stats.device_s += seconds_since(device_start);
      }
      wait_start = Clock::now();
      // One send() both waits for a credit and moves the bytes; the channel's own clocks split
      // the call into the two spans the report tells apart.
      last_target_rank_ = target.rank;
      const transport::ChannelStats before = target.channel->stats();
      const int64_t send_start = timing::now_ns();
      target.channel->send(payload, bytes.size());
      delay.apply(timing::Stage::send, rank, global);
      const int64_t send_end = timing::now_ns();
      const transport::ChannelStats after = target.channel->stats();
      const auto credit_ns = std::min<int64_t>(send_end - send_start,
                                               static_cast<int64_t>((after.wait_s - before.wait_s) * 1e9));
      const auto sequence = static_cast<int64_t>(before.batches);
      timing::Span span;
      span.step = global;
      span.peer = target.rank;
      span.sequence = sequence;
      span.stage = timing::Stage::credit_wait;
      span.start_ns = send_start;
      span.end_ns = send_start + credit_ns;
      recorder.record(span);
      span.stage = timing::Stage::send;
      span.start_ns = span.end_ns;
      span.end_ns = send_end;
      span.bytes = static_cast<int64_t>(bytes.size());
      recorder.record(span);
      stats.wait_s += seconds_since(wait_start);
      ++stats.batches;
      stats.bytes += static_cast<int64_t>(bytes.size());
      if (options_.after_send) options_.after_send(global);
    }
  } catch (...) {
    stop();
    throw;
  }
  stop();
  if (error) std::rethrow_exception(error);
  for (const auto& target : targets) target.channel->close();
  stats.read_s = read_s;
  stats.collate_s = collate_s;
  stats.wall_s = seconds_since(started);
  return stats;
}

}  // namespace sluice::runtime
