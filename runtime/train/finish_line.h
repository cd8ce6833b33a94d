#pragma once
// The end of `sluice train`: every rank waits for every other before the closing clock alignment
// and the timeline gather. Ranks finish their parts at different times: a data rank sends its last
// batch several steps before its model ranks train it (and an idle data rank of a replay run
// finishes at once), and the first model rank writes the final checkpoint while the others wait.
// A plain deadline on that wait would cap how long the last validation or checkpoint may take;
// none would let a hung rank hang the job. So the ranks still working say so: the process's
// heartbeat (common/heartbeat.h, LIVENESS) does, and wait_for_everyone() waits while every
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
#include "runtime/train/role_plan.h"

namespace sluice::runtime {

// The ranks whose heartbeat `rank` watches in `sluice train` (Heartbeat::watch_only), a relation
// that is symmetric (each of them watches `rank` too), so that a beat goes only where it is
// listened for: its feed peers (a data rank's model ranks, a model rank's data rank), its two
// neighbours in the ring of model ranks (the gradient all-reduce), and its parent and children in
// the rank tree (common/rank_tree.h; the end of the run). Every wait of the run ends at a rank
// that one of these watches, so a stopped rank is still named; a rank watches at most
// feeds + 2 + 7 x log8(ranks) others instead of ranks - 1.
std::vector<int> heartbeat_peers(const RolePlan& roles, int rank, int size);

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
