#pragma once
// The one monotonic clock of sluice and the two questions every wait asks of it: how long since
// a start, and when a wait of N seconds must end. Every deadline across ranks is a Deadline.
// Beside it, the calling thread's CPU clock, for what a thread cost rather than how long it took.
#include <time.h>

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

// The calling thread's CPU seconds so far (CLOCK_THREAD_CPUTIME_ID): user + system time it ran,
// not the time it waited for a core or a device.
inline double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

}  // namespace sluice
