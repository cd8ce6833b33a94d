#pragma once
// Rank 0's live status line during `sluice train`, gathered without a barrier.
//
// Every rank calls post() at its own step boundaries (on the thread that makes MPI calls). At most
// once per `every_s` a rank sends rank 0 a short status (a non-blocking send of a few hundred
// bytes; a rank never has more than one in flight and skips a post while the last is pending).
// Rank 0 takes whatever has arrived whenever it posts itself and prints one line per interval:
//   status: step 120/300 | 41.2 samples/s, 9100 frames/s | input wait 3.1% | slowest rank 2 (host, model) 0.41 s/step
// Nobody waits for anybody: a silent rank only makes its numbers older (the line says how old).
#include <cstdint>
#include <map>
#include <string>

#include <mpi.h>

#include "common/mpi_session.h"

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

class StatusBoard {
 public:
  StatusBoard(const MpiSession& session, double every_s);
  ~StatusBoard();
  StatusBoard(const StatusBoard&) = delete;
  StatusBoard& operator=(const StatusBoard&) = delete;

  // Whether a post is due (cheap; call before computing a status).
  bool due() const;
  void post(const RankStatus& status);

  // The line rank 0 prints for these statuses (tests).
  static std::string render(const std::map<int, RankStatus>& statuses, const MpiSession& session);

 private:
  void drain();  // rank 0: takes every status that has arrived

  const MpiSession& session_;
  double every_s_;
  double last_post_ = -1e300;
  double started_;
  MPI_Request pending_ = MPI_REQUEST_NULL;
  std::string outgoing_;
  std::map<int, RankStatus> latest_;  // rank 0: by rank
};

}  // namespace sluice::runtime
