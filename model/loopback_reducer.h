#pragma once
// LoopbackReducer: an in-process GradientReducer that stands in for `world_size` ranks which all
// hold the same gradients, so the sum over ranks is data * world_size and the trainer's division
// by world_size gives back the local gradient exactly. start() hands buckets to a background
// thread (as a real transport's progress thread would), so the trainer's overlap path runs for
// real. For tests and single-process runs; it records which buckets it reduced.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "model/gradient_reducer.h"

namespace sluice::model {

class LoopbackReducer : public GradientReducer {
 public:
  struct BucketCall {
    int bucket_id;
    size_t count;
  };

  explicit LoopbackReducer(int world_size, size_t bucket_bytes = size_t{25} << 20);
  ~LoopbackReducer() override;  // joins the worker; never throws
  LoopbackReducer(const LoopbackReducer&) = delete;
  LoopbackReducer& operator=(const LoopbackReducer&) = delete;

  int world_size() const override { return world_size_; }
  int rank() const override { return 0; }
  void all_reduce_sum(float* data, size_t count) override;
  void start(int bucket_id, float* data, size_t count) override;
  void wait_all() override;  // blocks until every started bucket is reduced; rethrows its error
  size_t bucket_bytes() const override { return bucket_bytes_; }

  // Buckets in the order start() received them, since construction.
  std::vector<BucketCall> started() const;
  int wait_all_calls() const;

 private:
  struct Job {
    float* data;
    size_t count;
  };
  void run_worker();

  const int world_size_;
  const size_t bucket_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable job_ready_;
  std::condition_variable jobs_done_;
  std::deque<Job> jobs_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<BucketCall> started_;
  int wait_all_calls_ = 0;
  std::thread worker_;
};

}  // namespace sluice::model
