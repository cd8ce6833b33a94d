#pragma once
// THE PROGRESS WATCHDOG (runtime.timeouts: measured). The heartbeat (common/heartbeat.h, LIVENESS)
// tells whether a rank's process runs: its thread beats whatever the rank's training does. So a
// rank whose training is stuck while its process lives (a hung GPU kernel, a deadlocked step, a
// stopped training thread) is never named by it, and a stopped rank only after runtime.timeout_s,
// which must be longer than any step, checkpoint or validation of any run. The watchdog judges a
// rank's own progress against deadlines measured from the run itself:
//
//  - The rank's training thread reports progress: a model rank each step it trained, a data rank
//    each batch it fed (stepped()). The time between two reports, less the time the thread waited
//    on a peer (PeerWait: its batch, a credit, the gradient all-reduce), is one measured step: the
//    rank's own work.
//  - A step's deadline: runtime.startup_timeout_s until runtime.timeout_warmup_steps steps are
//    measured (start-up, the first allocations and compiles), then
//    max(runtime.timeout_min_s, runtime.timeout_factor x the p99 of the last 100 measured steps).
//    A rank slowed little by little (a CPU quota lowered step by step, a throttled GPU) moves its
//    deadline with it; a step far longer than any of the last 100 is stuck.
//  - A checkpoint or a validation pass (Phase) has a deadline of its own: startup_timeout_s until
//    one is measured, then max(timeout_min_s, factor x the longest measured).
//  - A wait on a peer is the peer's to answer for. Past the deadline, a peer whose heartbeat has
//    been silent for more than half of it is named the way the heartbeat names a silent rank
//    ("gave no sign of life for T s"), in seconds instead of runtime.timeout_s; a peer that still
//    beats is waited for (its own watchdog judges its progress; a Python model rank has none and
//    is waited for as before, up to the heartbeat's runtime.timeout_s).
//  - Past the deadline outside a wait, the rank names itself stuck ("rank R (host H) is stuck: no
//    progress for T s at global step S", the deadline and the measured p99, and whether its
//    training thread is stopped: traced or SIGSTOPped, from /proc/self/task/TID/stat).
// Either way the rank ends the job the way a rank that fails does (launcher/launch.cpp, end_job):
// it says why, announces its failure to the other ranks, waits the abort grace, and calls
// MPI_Abort with exit code 1; `sluice supervise` reads the line (fault kinds silent and stuck) and
// restarts the job. It ends from the watchdog's own thread, because the training thread is the
// one that is stuck: such a rank writes no timeline.
//
// Cost: the watchdog thread wakes every 100 ms and reads a few atomics; the training thread's
// reports are a clock read and a few atomic stores (a sequence counter lets the watchdog read
// them consistently without a lock the stuck thread could hold).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mpi_session.h"
#include "runtime/train/train_settings.h"

namespace sluice::runtime {

// The deadline of one kind of work, from the times measured so far: startup_s until `warmup` of
// them went by (not kept: start-up's allocations and compiles) and one more was measured, then
// max(min_s, factor x the p99 of the last 100 kept). Not thread-safe: the watchdog guards it.
class MeasuredDeadline {
 public:
  static constexpr size_t window = 100;
  MeasuredDeadline(const ProgressTimeouts& timeouts, int64_t warmup) : timeouts_(timeouts), warmup_(warmup) {}
  void add(double seconds);
  double deadline_s() const;
  // The p99 (nearest rank) of the window; 0 before anything was measured.
  double p99_s() const;
  int64_t measured() const { return measured_; }
  bool warmed_up() const { return !recent_.empty(); }
  // {measured, warmup, p99_s, factor, min_s, deadline_s, from: "startup_timeout_s" | "measured" | "timeout_min_s"}
  nlohmann::json to_json() const;

 private:
  ProgressTimeouts timeouts_;
  int64_t warmup_;
  std::deque<double> recent_;
  int64_t measured_ = 0;
};

class ProgressWatchdog {
 public:
  enum class Phase { steps, checkpoint, validation, done };

  // Made on the rank's training thread (the one it watches), after the heartbeat started. `role`:
  // "data" or "model". `abort_grace_s`: how long a failing rank lets the others name it before
  // MPI_Abort (launcher/launch.cpp).
  ProgressWatchdog(const MpiSession& session, const ProgressTimeouts& timeouts, std::string role,
                   double abort_grace_s);
  ~ProgressWatchdog();  // stops the thread
  ProgressWatchdog(const ProgressWatchdog&) = delete;
  ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

  // The training thread's reports. stepped(): a step trained or a batch fed, `global_step` its
  // global step; the own time since the last report is measured.
  void stepped(int64_t global_step);
  // A checkpoint or validation pass from here to end_phase(), judged against its own deadline
  // and measured into it; Phase::done: the rank's part is over (nothing is judged any more).
  void begin_phase(Phase phase);
  void end_phase();

  // A checkpoint or validation pass for the scope's life (nothing without a watchdog).
  class PhaseScope {
   public:
    PhaseScope(ProgressWatchdog* watchdog, Phase phase);
    ~PhaseScope();
    PhaseScope(const PhaseScope&) = delete;
    PhaseScope& operator=(const PhaseScope&) = delete;

   private:
    ProgressWatchdog* watchdog_;
  };

  // The training thread waits on `peers` (world ranks) for `what` ("its batch", "a credit",
  // "the gradient all-reduce") while it lives: the time is the peers', not this rank's own.
  // Does nothing without a watchdog (ProgressWatchdog::process() null: runtime.timeouts fixed, a
  // Python model rank, one process).
  class PeerWait {
   public:
    PeerWait(const std::vector<int>& peers, const char* what);
    ~PeerWait();
    PeerWait(const PeerWait&) = delete;
    PeerWait& operator=(const PeerWait&) = delete;

   private:
    ProgressWatchdog* watchdog_;
  };

  // The deadlines as measured, for the rank's summary (report.json's progress_deadlines):
  // {role, mode: "measured", step: MeasuredDeadline::to_json(), checkpoint: ..., validation: ...}.
  nlohmann::json to_json() const;

  // This process's running watchdog, or nullptr (for the waits of the feed and the reducer, which
  // have none of their own).
  static ProgressWatchdog* process();

 private:
  struct Judged;
  void loop();
  void judge();
  void begin_wait(const std::vector<int>& peers, const char* what);
  void end_wait();
  // The seqlock's write side (training thread only).
  void write_begin() { sequence_.fetch_add(1); }
  void write_end() { sequence_.fetch_add(1); }
  char training_thread_state_code() const;  // /proc/self/task/TID/stat's state: R, S, D, T, t
  bool training_thread_stopped() const;
  std::string training_thread_state() const;
  std::string deadline_text(const Judged& judged) const;
  [[noreturn]] void end_rank(const std::string& message);

  const MpiSession& session_;
  ProgressTimeouts timeouts_;
  std::string role_;
  double abort_grace_s_;
  long training_tid_;
  std::thread::id training_thread_;

  // Written by the training thread between write_begin() and write_end(); read by the watchdog
  // when the counter is even and unchanged around its reads.
  std::atomic<uint64_t> sequence_{0};
  std::atomic<int> phase_{static_cast<int>(Phase::steps)};
  std::atomic<int64_t> step_{-1};              // the last global step reported; -1 before one
  std::atomic<int64_t> own_before_ns_{0};      // own time of this interval before the current segment
  std::atomic<int64_t> segment_start_ns_{0};   // the current own-work segment began
  std::atomic<bool> waiting_{false};
  std::atomic<int64_t> wait_start_ns_{0};
  std::atomic<const char*> wait_what_{""};
  // The peers of the current wait (written before waiting_ is set; the watchdog reads them under
  // the lock, which the training thread takes only around the copy).
  mutable std::mutex wait_mutex_;
  std::vector<int> wait_peers_;

  mutable std::mutex deadlines_mutex_;
  MeasuredDeadline step_deadline_, checkpoint_deadline_, validation_deadline_;

  std::mutex stop_mutex_;
  std::condition_variable stop_requested_;
  bool stopping_ = false;
  int wait_depth_ = 0;  // training thread only: a wait inside a wait is the outer one's
  std::thread thread_;
};

}  // namespace sluice::runtime
