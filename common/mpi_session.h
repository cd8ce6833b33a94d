#pragma once
// The process's MPI session and the few cross-rank exchanges sluice makes outside the data path.
//
// Every exchange here has a deadline: nothing waits forever for a rank that died or went silent.
// On a deadline the call throws TransportError naming the ranks (and their hosts) that were not
// heard from; the launcher then calls abort() so the other ranks are not left waiting either.
//
// Without mpirun/srun the same code runs as a one-rank world (MPI singleton).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "common/clock.h"
#include "common/mpi_handle.h"
#include "common/heartbeat.h"

namespace sluice {

// "rank R (host H)", the way every error and warning names a rank; "rank R" when `hosts` does
// not know it.
std::string describe_rank(int rank, const std::vector<std::string>& hosts);

class MpiSession {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE (the heartbeat thread below calls MPI while the main
  // thread and a CUDA trainer's autograd thread do) unless it is already initialised, exchanges
  // host names and duplicates the world communicator for the heartbeat (collectives made once at
  // start-up). SLUICE_HEARTBEAT=off keeps MULTIPLE without a heartbeat, =serialized asks for
  // MPI_THREAD_SERIALIZED and no heartbeat (both: to measure what the heartbeat costs; without a
  // heartbeat every wait falls back to a plain deadline of timeout_s).
  //
  // MPI_Init and these first collectives wait for every rank of the job to start: a rank that
  // never does (a Python rank that exited or failed before `import sluice`, a program in an MPMD
  // launch that is not an MPI program) would hold this one forever, silently. After
  // `join_timeout_s` (runtime.timeout_s where the command has read it) this rank says so and
  // ends itself with exit code 1; mpirun then ends the others.
  MpiSession(int* argc, char*** argv, double join_timeout_s = 120);
  // With a running heartbeat, meets every other rank in a barrier polled with PollBackoff before
  // MPI_Finalize (see meet_before_finalize), then finalises MPI.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  const std::string& host() const { return hosts_[static_cast<size_t>(rank_)]; }
  // Ranks on this node (MPI_COMM_TYPE_SHARED) and this rank's place among them.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host_of(int rank) const { return hosts_.at(static_cast<size_t>(rank)); }
  // "rank 3 (host node07)": how errors name a rank.
  std::string describe(int rank) const;

  // Ends every rank of the job with `code`. Used after an error that other ranks may wait on.
  [[noreturn]] void abort(int code) const;
  // Tells the other ranks that this one failed with exit code `code` (see
  // Heartbeat::announce_failure), so that the ranks waiting on it stop and write their timelines
  // before abort() ends them, and end with its code.
  void announce_failure(int code) const;
  // The first other rank this one heard announce a failure, with its exit code; nullopt when none
  // (or without a heartbeat). waiting up to `seconds` for one to arrive.
  struct Failure {
    int rank = -1;
    int code = 1;
  };
  std::optional<Failure> first_failure(double wait_s = 0) const;
  // Whether the heartbeat runs: the ranks have started their parts of the job, and may fail alone.
  bool heartbeat_running() const;
  // Seconds between two beats (a failure announced now is heard within about one); 0 without one.
  double heartbeat_interval_s() const;

  // This rank's heartbeat (see Heartbeat), started on the first call; later calls with a shorter
  // timeout_s make it beat more often. nullptr where there is none (one rank, SLUICE_HEARTBEAT).
  // Every rank that waits on another calls it with runtime.timeout_s before its first wait.
  const Heartbeat* heartbeat(double timeout_s) const;
  // Limits this rank's heartbeat to `peers` (Heartbeat::watch_only); call before heartbeat().
  void limit_heartbeat(std::vector<int> peers) const;

 private:
  bool owns_mpi_ = false;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  // MPI_Finalize waits for every rank, and Open MPI's wait (a PMIx fence) polls every 100 us:
  // about a tenth of a core for as long as the last rank works on (a Python script that goes on
  // after feed.close(), the rank writing the report). So the ranks first meet in a non-blocking
  // barrier polled with a PollBackoff, while the heartbeat still runs: the wait lasts as long as
  // the others are alive; a rank that failed or went silent for runtime.timeout_s ends it with a
  // warning naming that rank (MPI_Finalize follows, as it did without the barrier). Without a
  // heartbeat (one rank, SLUICE_HEARTBEAT, a command that never started it) there is no barrier.
  void meet_before_finalize() noexcept;

  std::vector<std::string> hosts_;
  std::unique_ptr<Heartbeat> heartbeat_;  // stopped before MPI_Finalize
};

// Sends `payload` to `destination`, waiting for the send to complete until `deadline`.
void send_string(const MpiSession& session, int destination, int tag, const std::string& payload,
                 Deadline deadline, const std::string& what);

// Receives one message with `tag` from `source` (or MPI_ANY_SOURCE; the sender is stored in
// *sender) before `deadline`. Throws TransportError naming the silent rank and `what` was awaited.
std::string receive_string(const MpiSession& session, int source, int tag, Deadline deadline,
                           const std::string& what, int* sender = nullptr);

// Receives a pending message with `tag` if one has arrived; never blocks.
bool try_receive_string(const MpiSession& session, int tag, std::string& payload, int& sender);

// Rank 0 gets every rank's `local` (index = rank); other ranks get an empty vector.
std::vector<std::string> gather_strings(const MpiSession& session, const std::string& local,
                                        int tag, double timeout_s, const std::string& what);

// Every rank gets rank 0's `value`.
std::string broadcast_string(const MpiSession& session, const std::string& value, int tag,
                             double timeout_s, const std::string& what);

}  // namespace sluice
