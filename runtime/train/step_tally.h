#pragma once
// What a model rank tallies of its steps: the totals of ranks/rank-N.json (samples, real frames,
// seconds waiting for batches and computing) and the interval the live status line reports. Each
// model side keeps one: the C++ model loop (model_loop.cpp) and a Python rank's batch stream
// (batch_stream.h), so both count a batch and report an interval the same way.
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/status_board.h"

namespace sluice::runtime {

class StepTally {
 public:
  // A batch handed to the model: its samples and real (unpadded) frames.
  void count(const BatchPointers& batch);
  void add_wait(double seconds);     // waiting for a batch
  void add_compute(double seconds);  // the step itself
  // The status over the interval since the last one (or restart_interval()), as `role` at `step`
  // of `end_step`; a new interval starts.
  RankStatus take_status(std::string role, int64_t step, int64_t end_step);
  void restart_interval() { interval_ = Interval{}; }

  int64_t samples() const { return samples_; }
  int64_t frames() const { return frames_; }
  double wait_s() const { return wait_s_; }
  double compute_s() const { return compute_s_; }

 private:
  int64_t samples_ = 0, frames_ = 0;
  double wait_s_ = 0, compute_s_ = 0;
  struct Interval {
    Clock::time_point start = Clock::now();
    double wait_s = 0, busy_s = 0;
    int64_t steps = 0, samples = 0, frames = 0;
  } interval_;
};

}  // namespace sluice::runtime
