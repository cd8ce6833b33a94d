#pragma once
// The one monotonic clock of sluice and the two questions every wait asks of it: how long since
// a start, and when a wait of N seconds must end. Every deadline across ranks is a Deadline.
#include <chrono>
#include <cstdint>

namespace sluice {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline double seconds_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

inline double seconds_since(Clock::time_point start) { return seconds_between(start, Clock::now()); }

inline int64_t nanoseconds_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

}  // namespace sluice
