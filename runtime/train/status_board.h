#pragma once
// Rank 0's live status line during `sluice train`, gathered up a tree without a barrier.
//
// Every rank calls post() at its own step boundaries (on the thread that makes MPI calls). At most
// once per `every_s` a rank merges its own status with the latest summary of each of its children
// in the rank tree (common/rank_tree.h) and sends the merged summary to its parent: a fixed-size
// message (StatusSummary, 72 bytes) whatever the number of ranks below it; a non-blocking send,
// never more than one in flight (a post is skipped while the last one is pending). Rank 0, the
// root, merges the same way and prints one line per interval:
//   status: step 120/300 | 41.2 samples/s, 9100 frames/s | input wait 3.1% | slowest rank 2 (host) 0.41 s/step
//           (4096 of 4096 ranks reporting)
// A child whose summary is older than three intervals (or never came) is late: its whole subtree
// counts as not reporting and the line names the lowest such rank ("late: 8 ranks, first rank 24
// (host)"). Nobody waits for anybody: a slow or silent rank makes the line older or names it,
// never slows the run. Liveness (failing a run) is the heartbeat's job (common/heartbeat.h).
//
// Why a tree: with every rank sending to rank 0, rank 0 receives (ranks - 1) messages per
// interval; here every rank receives at most 7 x its tree level's digits (rank 0: 7 x log8(ranks),
// 28 at 4,096 ranks) and a leaf's numbers reach rank 0 after at most one interval per level.
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "common/mpi_session.h"
#include "common/rank_tree.h"

namespace sluice::runtime {

struct RankStatus {
  std::string role;             // data | model | data_and_model
  int64_t step = 0;             // global steps done (model) or sent (data)
  int64_t end_step = 0;
  double samples_per_s = 0;     // model ranks: over the last interval
  double frames_per_s = 0;
  double input_wait = 0;        // model ranks: fraction of the interval waiting for batches
  double seconds_per_step = 0;  // busy (non-waiting) seconds per step over the interval
};

// The statuses of a subtree of ranks, merged. Plain data: sent as bytes between ranks of one job.
struct StatusSummary {
  int32_t reporting = 0;     // ranks whose status is in it
  int32_t late = 0;          // ranks of the subtree with no fresh status
  int32_t first_late = -1;   // the lowest of them, or -1
  int32_t models = 0;        // model ranks (and one-process ranks) among the reporting
  int64_t step = 0;          // the furthest model rank's global steps
  int64_t end_step = 0;
  double samples_per_s = 0;  // summed over model ranks
  double frames_per_s = 0;
  double input_wait = 0;     // summed over model ranks (the line shows the mean)
  int32_t slowest = -1;      // the model rank with the most busy seconds per step
  double slowest_s = 0;

  void add(int rank, const RankStatus& status);
  void add(const StatusSummary& other);
  // `rank` and the `ranks` ranks of its subtree sent nothing fresh.
  void add_late(int rank, int ranks);
};

class StatusBoard {
 public:
  StatusBoard(const MpiSession& session, double every_s);
  ~StatusBoard();
  StatusBoard(const StatusBoard&) = delete;
  StatusBoard& operator=(const StatusBoard&) = delete;

  // Whether a post is due (cheap; call before computing a status).
  bool due() const;
  void post(const RankStatus& status);

  // Rank 0: the summary its last line showed (tests).
  const StatusSummary& last_summary() const { return last_; }
  // The line rank 0 prints for a summary.
  static std::string render(const StatusSummary& summary, const MpiSession& session);

 private:
  void drain();  // takes every child summary that has arrived
  StatusSummary merge(const RankStatus& mine);

  const MpiSession& session_;
  double every_s_;
  double last_post_ = -1e300;
  int parent_;
  std::vector<int> children_;
  std::vector<StatusSummary> from_child_;
  std::vector<double> heard_;  // MPI_Wtime of each child's latest summary; < 0: never
  MPI_Request pending_ = MPI_REQUEST_NULL;
  StatusSummary outgoing_;
  StatusSummary last_;
};

}  // namespace sluice::runtime
