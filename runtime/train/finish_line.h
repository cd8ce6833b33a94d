#pragma once
// The end of `sluice train`: every rank waits for every other before the closing clock alignment
// and the timeline gather. Ranks finish their parts at different times: a data rank sends its last
// batch several steps before its model ranks train it (and an idle data rank of a replay run
// finishes at once), and the first model rank writes the final checkpoint while the others wait.
// A plain deadline on that wait would cap how long the last validation or checkpoint may take;
// none would let a hung rank hang the job. So the ranks still working say so: the process's
// heartbeat (common/mpi_session.h, LIVENESS) does, and wait_for_everyone() waits while every
// rank is alive and names the first silent for runtime.timeout_s. Without a heartbeat
// (SLUICE_HEARTBEAT=off|serialized) the ranks say it themselves:
//
//  - still_working() (called at every step boundary and around the final validation and
//    checkpoint) sends a one-byte "alive" message to this rank's watchers, at most every
//    timeout_s / 4: a model rank's watchers are its data rank and rank 0; the first model rank's
//    also the other model ranks (they wait for its checkpoint).
//  - wait_for_everyone() enters a non-blocking barrier and polls it, taking "alive" messages as
//    they come; it throws TransportError when neither the barrier completed nor an "alive" arrived
//    for runtime.timeout_s.
#include <chrono>
#include <vector>

#include "common/mpi_session.h"

namespace sluice::runtime {

class FinishLine {
 public:
  // Starts the process's heartbeat (MpiSession::heartbeat) for runtime.timeout_s: made before
  // any channel or reducer of `sluice train`, on every rank.
  FinishLine(const MpiSession& session, double timeout_s, std::vector<int> watchers);
  void still_working();
  void wait_for_everyone();

 private:
  void drain_alive_messages(std::chrono::steady_clock::time_point& last_heard);

  const MpiSession& session_;
  double timeout_s_;
  std::vector<int> watchers_;
  std::chrono::steady_clock::time_point last_sent_;
  const Heartbeat* heartbeat_;  // nullptr: the "alive" messages below
};

}  // namespace sluice::runtime
