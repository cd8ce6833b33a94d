#include "runtime/batch_feeder.h"

#include <chrono>
#include <condition_variable>
#include <optional>
#include <thread>

#include "common/error.h"
#include "runtime/batch_buffer.h"

namespace sluice::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

BatchFeeder::BatchFeeder(cache::CacheReader& reader, const PlanSchedule& schedule, int reader_threads,
                         int read_ahead)
    : reader_(reader), schedule_(schedule), reader_threads_(std::max(1, reader_threads)),
      read_ahead_(std::max(1, read_ahead)) {}

FeedStats BatchFeeder::run(int64_t first_step, int64_t end_step, const std::vector<FeedTarget>& targets) {
  const auto started = Clock::now();
  const int32_t n_mels = reader_.n_mels();
  const int64_t per_step = static_cast<int64_t>(targets.size());
  const int64_t tasks = (end_step - first_step) * per_step;  // task t: step first + t / per_step
  const size_t window = static_cast<size_t>(read_ahead_) * targets.size();

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::optional<std::vector<std::byte>>> ready(window);
  int64_t next_task = 0, sent = 0;
  bool stopping = false;
  std::exception_ptr error;
  double read_s = 0, collate_s = 0;

  auto worker = [&] {
    std::vector<cache::Sample> samples;
    std::vector<std::byte> bytes;
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
        reader_.read_batch(planned.samples, samples);
        my_read += seconds_since(start);
        start = Clock::now();
        collate(samples, plan->buckets()[static_cast<size_t>(planned.bucket)], n_mels, at.epoch, at.step,
                planned.bucket, bytes);
        my_collate += seconds_since(start);
        {
          std::lock_guard<std::mutex> lock(mutex);
          ready[static_cast<size_t>(task) % window] = std::move(bytes);
        }
        bytes = {};
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
  for (int i = 0; i < reader_threads_; ++i) threads.emplace_back(worker);
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
      std::vector<std::byte> bytes;
      auto wait_start = Clock::now();
      {
        std::unique_lock<std::mutex> lock(mutex);
        auto& slot = ready[static_cast<size_t>(task) % window];
        changed.wait(lock, [&] { return stopping || slot.has_value(); });
        if (!slot.has_value()) break;  // a worker failed
        bytes = std::move(*slot);
        slot.reset();
        ++sent;
      }
      changed.notify_all();
      stats.wait_s += seconds_since(wait_start);
      const FeedTarget& target = targets[static_cast<size_t>(task % per_step)];
      wait_start = Clock::now();
      target.channel->send(bytes.data(), bytes.size());
      stats.wait_s += seconds_since(wait_start);
      ++stats.batches;
      stats.bytes += static_cast<int64_t>(bytes.size());
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
