#include "model/loopback_reducer.h"

#include <string>

#include "common/error.h"

namespace sluice::model {

LoopbackReducer::LoopbackReducer(int world_size, size_t bucket_bytes)
    : world_size_(world_size), bucket_bytes_(bucket_bytes) {
  if (world_size < 1) {
    throw ConfigError("LoopbackReducer: world_size must be >= 1, got " + std::to_string(world_size));
  }
  if (bucket_bytes < sizeof(float)) {
    throw ConfigError("LoopbackReducer: bucket_bytes must be >= 4, got " + std::to_string(bucket_bytes));
  }
  worker_ = std::thread([this] { run_worker(); });
}

LoopbackReducer::~LoopbackReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void LoopbackReducer::all_reduce_sum(float* data, size_t count) {
  const float ranks = static_cast<float>(world_size_);
  for (size_t i = 0; i < count; ++i) data[i] *= ranks;
}

void LoopbackReducer::start(int bucket_id, float* data, size_t count) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_.push_back({bucket_id, count});
    jobs_.push_back({data, count});
    ++in_flight_;
  }
  job_ready_.notify_one();
}

void LoopbackReducer::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++wait_all_calls_;
  jobs_done_.wait(lock, [this] { return in_flight_ == 0; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

std::vector<LoopbackReducer::BucketCall> LoopbackReducer::started() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_;
}

int LoopbackReducer::wait_all_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return wait_all_calls_;
}

void LoopbackReducer::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    job_ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    Job job = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      all_reduce_sum(job.data, job.count);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !error_) error_ = failure;
    if (--in_flight_ == 0) jobs_done_.notify_all();
  }
}

}  // namespace sluice::model
