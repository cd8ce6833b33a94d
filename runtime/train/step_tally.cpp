#include "runtime/train/step_tally.h"

#include <utility>

namespace sluice::runtime {

void StepTally::count(const BatchPointers& batch) {
  const int64_t batch_frames = batch.real_frames();
  frames_ += batch_frames;
  samples_ += batch.header->batch_size;
  ++interval_.steps;
  interval_.samples += batch.header->batch_size;
  interval_.frames += batch_frames;
}

void StepTally::add_wait(double seconds) {
  wait_s_ += seconds;
  interval_.wait_s += seconds;
}

void StepTally::add_compute(double seconds) {
  compute_s_ += seconds;
  interval_.busy_s += seconds;
}

RankStatus StepTally::take_status(std::string role, int64_t step, int64_t end_step) {
  const double seconds = seconds_since(interval_.start);
  RankStatus status;
  status.role = std::move(role);
  status.step = step;
  status.end_step = end_step;
  status.samples_per_s = double(interval_.samples) / seconds;
  status.frames_per_s = double(interval_.frames) / seconds;
  status.input_wait = interval_.wait_s / seconds;
  status.seconds_per_step = interval_.steps > 0 ? interval_.busy_s / double(interval_.steps) : 0;
  interval_ = Interval{};
  return status;
}

}  // namespace sluice::runtime
