#include "common/poll_backoff.h"

#include <algorithm>
#include <thread>

namespace sluice {

PollBackoff::PollBackoff(std::chrono::microseconds max_sleep, Clock::time_point start) noexcept
    : max_sleep_(std::max(max_sleep, short_cap)), start_(start) {}

void PollBackoff::reset(Clock::time_point now) noexcept {
  start_ = now;
  polls_ = 0;
  sleep_ = first_sleep;
}

Clock::duration PollBackoff::plan(Clock::time_point now, size_t moving_bytes) {
  using std::chrono::microseconds;
  const Clock::duration age = now - start_;
  if (moving_bytes > 0) {
    const auto moving = short_cap + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                        static_cast<double>(moving_bytes) / moving_bytes_per_s));
    if (age < moving) return Clock::duration::zero();
  } else if (polls_ < spin_polls && age < spin_time) {
    ++polls_;
    return Clock::duration::zero();
  }
  polls_ = spin_polls;  // a wait that slept does not spin again until reset()
  const auto cap = std::clamp(std::chrono::duration_cast<microseconds>(age / age_divisor), short_cap, max_sleep_);
  const microseconds pause = std::min(sleep_, cap);
  sleep_ = std::min(sleep_ * 2, cap);
  return pause;
}

void PollBackoff::act(Clock::duration pause) {
  if (pause == Clock::duration::zero()) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(pause);
  }
}

void PollBackoff::pause() { act(plan(Clock::now())); }

void PollBackoff::pause_moving(size_t bytes) { act(plan(Clock::now(), bytes)); }

}  // namespace sluice
