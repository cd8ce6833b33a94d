#pragma once
// THE HEARTBEAT TREE: liveness with a progress payload, polled by the main thread of a job that
// has no use for a heartbeat thread (`sluice prep`: its main thread only supervises the shard
// builder's threads, so it polls every few tens of milliseconds anyway, and the tree still works
// under SLUICE_HEARTBEAT=off|serialized). The thread heartbeat (common/heartbeat.h) is the flat
// topology: a one-byte beat to a set of peers. This is the tree topology (common/rank_tree.h) with
// a payload summed on the way up.
//
// Protocol. Every interval_s a rank sends its parent one beat, the progress of its whole subtree
// (its own payload plus its children's latest beats, summed member by member) with the ranks of
// that subtree silent for longer than timeout_s (each with its last progress), and pings its
// children, so that a child can tell a slow parent from a stopped one. Rank 0 so takes at most
// 7 x log8(ranks) beats an interval (28 at 4,096 ranks) and sends as many pings, instead of
// ranks - 1 of each. A stopped rank is named by its parent: at once when that is rank 0, else in
// the parent's next beat (subtree_beat()["silent"] on rank 0; the job decides how to fail); its
// own children see the pings stop and poll() throws naming it. Every rank polls until it has the
// job's outcome: a rank whose own share is done may still be relaying its children's.
//
// One message in flight per destination: a beat or ping not yet taken holds back the next one
// (nothing queues up behind a slow receiver). Messages travel on the world communicator with the
// job's own two tags.
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/mpi_session.h"

namespace sluice {

class HeartbeatTree {
 public:
  struct Tags {
    int beat;  // child -> parent: the subtree's beat
    int ping;  // parent -> child
  };
  // How the errors name the job and what they add after the silence ("prep", "finished shards are
  // kept for a rerun": "rank 0 (host h) (prep coordinator) has been silent for 5 s
  // (runtime.timeout_s); finished shards are kept for a rerun").
  struct Wording {
    std::string job;
    std::string after_silence;
  };

  HeartbeatTree(const MpiSession& session, double interval_s, double timeout_s, Tags tags, Wording wording);
  HeartbeatTree(const HeartbeatTree&) = delete;
  HeartbeatTree& operator=(const HeartbeatTree&) = delete;
  // Sends nobody will take any more are cancelled (logged on failure: never throws).
  ~HeartbeatTree();

  // Non-blocking, called every few tens of milliseconds: takes the children's beats and the
  // parent's pings; once an interval, sends this subtree's beat up and pings the children.
  // `own` is this rank's progress: a JSON object whose integer members are summed over the subtree
  // ({} for none). Returns true on the calls that ticked. Throws TransportError naming the parent
  // when its pings have stopped for timeout_s.
  bool poll(const nlohmann::json& own);

  // `own`'s integer members summed with this rank's subtree's, and `silent`:
  // [{rank, seconds, last, noticed_by}] for the ranks below it that stopped beating (`last`: their
  // latest beat, null when none came).
  nlohmann::json subtree_beat(const nlohmann::json& own) const;

 private:
  void send_if_free(MPI_Request& request, std::string& buffer, std::string text, int to, int tag);

  const MpiSession& session_;
  double interval_s_, timeout_s_;
  Tags tags_;
  Wording wording_;
  int parent_;
  std::vector<int> children_;
  std::map<int, nlohmann::json> latest_;  // child -> its latest beat (its subtree)
  std::map<int, Clock::time_point> last_heard_;
  Clock::time_point last_ping_, last_tick_;
  MPI_Request beat_request_ = MPI_REQUEST_NULL;
  std::string beat_text_;
  std::map<int, std::pair<MPI_Request, std::string>> pings_;  // child -> the ping in flight
};

}  // namespace sluice
