#pragma once
// The liveness heartbeat: one thread per rank that beats to its peers and says who went silent.
// MpiSession (common/mpi_session.h) owns the process's one heartbeat.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mpi.h>

#include "common/mpi_handle.h"

namespace sluice {

// LIVENESS. A deadline in sluice measures whether a peer is alive, not how long its work takes:
// a model step, a checkpoint or a validation of any length never fails a run, while a rank that
// is stopped (SIGSTOP, a frozen node), dead or cut off is named within about runtime.timeout_s.
//
// Every rank runs one heartbeat thread that sends a one-byte "alive" message to every other rank
// every interval_s() (runtime.timeout_s / 10, at most 0.5 s) on a communicator of its own, and
// takes the others' messages as they come. A rank whose messages stopped for longer than
// timeout_s is silent: the thread runs whatever the rank's other threads do (a long torch step,
// a blocking read), so silence means the process is not running at all (stopped, dead) or its
// network is gone. The thread is scheduled even on a rank held to a few percent of a core.
// Silence is counted only while this rank's own thread listens: a listener that was stopped or
// starved, between two listens or inside one of its own MPI calls, does not blame its peers for
// the time it did not run (it logs that it did not run). When a peer has been silent for half the
// deadline, the thread logs a warning naming it, so that the culprit is named even if the
// launcher ends the job first.
// A rank that ends normally says goodbye (MpiSession's destructor): its silence after that is
// not counted. A rank that fails says so (announce_failure) before it ends the job: a rank
// waiting on it, even one that is only waiting on a healthy rank that waits on it, then stops at
// once, names it and writes its timeline, instead of being killed mid-wait by the abort with
// nothing written. What a heartbeat cannot see: a live process whose main thread is stuck in a loop
// or deadlock.
//
// Scale: beating to every rank costs ranks x (ranks - 1) messages per interval (16.8 million at
// 4,096 ranks). watch_only() limits a rank's beats and its listening to the peers it waits on
// and that wait on it, a symmetric set every rank computes alike (`sluice train`:
// runtime/train/finish_line.h heartbeat_peers(): feed peers, ring neighbours among the model
// ranks, rank-tree parent and children), so each rank sends and takes O(log ranks) beats per
// interval. A rank outside the set is never silent to silent_s() / first_lost(): nothing
// here knows about it, and one of its own peers, waiting on it, names it instead. A failure
// (announce_failure) is still told to every rank: once per run, not per interval.
class Heartbeat {
 public:
  Heartbeat(MPI_Comm world, std::vector<std::string> hosts, bool beat);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Starts the thread (once) or shortens its interval to fit timeout_s.
  void start(double timeout_s);
  // Beats to and listens for `peers` only (see Scale above); every other rank before it.
  void watch_only(std::vector<int> peers);
  // Stops the thread; no MPI call after it returns. Called before MPI_Finalize.
  void stop();
  bool running() const { return thread_.joinable(); }
  double interval_s() const { return interval_s_.load(); }
  // The shortest runtime.timeout_s it was started with (0 before start()).
  double timeout_s() const { return timeout_s_.load(); }
  // Tells every other rank that this one failed and is about to end the job with exit code
  // `code` (0-255; from any thread; a no-op when the thread is not running).
  void announce_failure(int code);
  // The first rank heard announcing a failure and its exit code, or {-1, 0}.
  std::pair<int, int> first_failure() const;
  // Seconds `rank` has been silent while this rank listened; 0 for this rank itself.
  double silent_s(int rank) const;
  // Whether `rank` announced that it failed.
  bool failed(int rank) const;
  // Whether `rank` is lost to this one: it failed, or was silent for longer than timeout_s, or,
  // once this rank got a stop signal (common/stop_signal.h), for longer than
  // stopping_silence_s(). A stop asks every rank to agree on a step and checkpoint; a peer that
  // stopped beating cannot agree, and under Slurm the stop is often the news of its death (srun
  // sends SIGTERM to the other tasks when one is killed, then SIGKILL after KillWait): waiting
  // runtime.timeout_s for it only runs into that SIGKILL. A live peer beats every interval_s()
  // whatever its step does, so a healthy slow one is still waited for.
  bool lost(int rank, double timeout_s) const;
  // The silence that loses a peer after a stop signal: 5 intervals, at least 2 s (2.5 s with the
  // default runtime.timeout_s = 120).
  double stopping_silence_s() const;
  // The first of `ranks` that is lost, or -1.
  int first_lost(const std::vector<int>& ranks, double timeout_s) const;
  // "rank 3 (host node1) gave no sign of life for 4.2 s (runtime.timeout_s = 4): it is stopped,
  // dead or cut off from this rank", or, for a rank that announced its failure, that it failed.
  std::string describe_loss(int rank, double timeout_s) const;
  // The running heartbeat of this process, or nullptr: for code that has no MpiSession (the
  // gradient reducer).
  static const Heartbeat* process();

 private:
  void loop();
  void beat(int tag, int code = 1);
  void listen();
  void forgive_own_stall(int64_t listen_began_ns);
  void warn_about_silence();
  std::string describe(int rank) const;

  MpiCommunicator comm_;  // a duplicate of the world: no beat can match a receive of the job
  int rank_ = 0;
  std::vector<std::string> hosts_;
  bool beat_ = true;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mutex_;
  std::condition_variable stop_requested_;
  std::atomic<double> interval_s_{0.5};
  std::atomic<double> warn_after_s_{0.0};
  std::atomic<double> timeout_s_{0.0};
  // Steady-clock nanoseconds: when each rank was last heard, when this rank last listened.
  std::unique_ptr<std::atomic<int64_t>[]> heard_ns_;
  std::unique_ptr<std::atomic<bool>[]> failed_;  // announced by the rank itself
  std::atomic<int> first_failed_{-1};            // the first of them heard, and its exit code
  std::atomic<int> first_failed_code_{0};
  std::atomic<int64_t> listened_ns_{0};
  std::vector<bool> warned_;  // heartbeat thread only
  // watch_only(): whom this rank beats to (empty: everyone) and whose silence it counts.
  mutable std::mutex peers_mutex_;
  std::vector<int> peers_;
  std::unique_ptr<std::atomic<bool>[]> watched_;
};

}  // namespace sluice
