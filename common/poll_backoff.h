#pragma once
// How a wait that can only poll paces its polls. MPI has no wait that sleeps: a blocking MPI call
// (MPI_Wait, MPI_Recv, a blocking collective) spins a core in Open MPI's progress loop until the
// peer acts, and a wait with a deadline or a liveness check must poll anyway (MPI_Test,
// MPI_Iprobe). An idle rank therefore costs what its polls cost, and on a node where it shares
// cores with the rank it feeds (a data rank beside a model rank) every poll is taken from that
// rank's step. PollBackoff makes a long wait nearly free while keeping a short one fast:
//
//  - spin: the first polls only yield (at most `spin_polls` of them, within `spin_time`), so a
//    message about to land costs no sleep;
//  - sleep: then it sleeps, 20 us at first, doubling, up to a cap that grows with the time
//    waited: 1 ms, or 1/32 of the wait so far, at most `max_sleep`. So an event is noticed at
//    most 1/32 (3%) of the wait later than it happened (and at most max_sleep later), and a wait
//    that lasts a model step wakes about 32 x ln(step / 32 ms) + 40 times, not once per ms.
//  - moving bytes (pause_moving): while a large message moves and both ranks must poll for it to
//    move (Open MPI's shared-memory transport without a single-copy mechanism copies a large
//    message in fragments, and the sender hands out the next ones only inside its own MPI
//    calls), it only yields for 1 ms + the time the bytes take at 2 GB/s, then paces as above;
//  - reset(): the peer showed that it is active again (e.g. a credit arrived while a batch's
//    bytes wait for the receiver): spin again.
//
// Liveness is not its business: every caller still checks its deadline or the heartbeat between
// polls, so a dead peer is named as before; the cap only bounds how late that check runs.
#include <chrono>
#include <cstddef>

#include "common/clock.h"

namespace sluice {

class PollBackoff {
 public:
  static constexpr std::chrono::microseconds default_max_sleep{20000};
  static constexpr int spin_polls = 64;
  static constexpr std::chrono::microseconds spin_time{200};
  static constexpr std::chrono::microseconds first_sleep{20};
  static constexpr std::chrono::microseconds short_cap{1000};
  static constexpr int age_divisor = 32;
  static constexpr double moving_bytes_per_s = 2e9;

  // `start`: when the wait began (tests give it; waits start now).
  explicit PollBackoff(std::chrono::microseconds max_sleep = default_max_sleep,
                       Clock::time_point start = Clock::now()) noexcept;

  // Pauses before the next poll of a wait for the peer to act.
  void pause();
  // Pauses before the next poll while `bytes` move between the ranks.
  void pause_moving(size_t bytes);
  // The awaited event is close again (the peer acted): spin, then sleep from the first sleep,
  // as a wait that begins at `now`.
  void reset(Clock::time_point now = Clock::now()) noexcept;

  // The pause that pause() / pause_moving() take at `now` (zero: a yield), advancing the state
  // as they do; for tests.
  Clock::duration plan(Clock::time_point now, size_t moving_bytes = 0);

 private:
  void act(Clock::duration pause);

  std::chrono::microseconds max_sleep_;
  Clock::time_point start_;
  int polls_ = 0;
  std::chrono::microseconds sleep_ = first_sleep;
};

}  // namespace sluice
