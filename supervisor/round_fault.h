#pragma once
// What ended a round of a supervised job (supervisor.h), read from the words the launcher and the
// ranks print: the supervisor is not a rank, so it knows only what mpirun, srun and the ranks'
// logs say, and the exit code. Each line of the job's output goes through FaultReader::read.
//
// The lines it knows (and nothing else: an unknown failure is "exited with code C"):
//   silent   a rank's error `rank R (host H) gave no sign of life for T s` (common/heartbeat.cpp,
//            Heartbeat::describe_loss): R was stopped, dead or cut off for T s
//   stuck    a rank's error `rank R (host H) is stuck: no progress for T s` (runtime.timeouts:
//            measured; runtime/train/progress_watchdog.cpp): R lived (its heartbeat beat) but its
//            training made no progress for T s, longer than its measured deadline
//   killed   mpirun `...noticed that process rank R with PID P on node H exited on signal S`,
//            srun `srun: error: H: task R: Killed` (and the other signal names srun prints)
//   lost     mpirun lost a node's daemon (`Remote daemon: [[J,0],D] on node H`), srun
//            `Node failure on H`: a node or its link went away
//   exited   mpirun `...process rank R with PID P on node H exited on non-zero status C`, srun
//            `srun: error: H: task R: Exited with exit code C`
// When several appear, the most telling wins: silent or stuck (the first of them), then killed or
// lost, then a silence named after a stop signal, then exited (a silent or stuck rank is SIGKILLed
// by the launcher afterwards, and its watchers exit non-zero: both are consequences). A silence
// named by a rank that was stopping (`..., this rank stopping on SIGTERM`: Heartbeat::lost names
// a silent peer after a few intervals then) ranks below killed: srun sends that SIGTERM because a
// task died, and the death is the cause. Training progress is the model ranks' `step N/M (epoch E)` line.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::supervisor {

using Clock = std::chrono::system_clock;

enum class FaultKind { none, exited, killed, lost, silent, stuck };

const char* to_string(FaultKind kind);

struct RoundFault {
  FaultKind kind = FaultKind::none;
  int rank = -1;         // -1: not named
  std::string host;      // "" when not named
  int signal = 0;        // killed: the signal number (0 when srun gave only its name)
  std::string signal_name;
  int exit_code = -1;    // exited: the rank's code
  double silent_s = 0;   // silent: how long it had been silent when named
  bool after_stop = false;  // silent: named by a rank stopping on a signal (a consequence, mostly)
  double stuck_s = 0;    // stuck: how long it had made no progress when it named itself
  std::string words;     // the line that named it (at most 300 characters)
  Clock::time_point seen_at{};  // when the supervisor read that line

  // Killed by a signal or a lost node: what a bad node looks like (leave it out at once).
  bool hardware_looking() const { return kind == FaultKind::killed || kind == FaultKind::lost; }
  // "rank 3 (host node1) killed by signal 9 (Killed)", "rank 2 (host a) silent for 4.1 s",
  // "rank 2 (host a) made no progress for 6.3 s (stuck)", ...
  std::string describe() const;
  nlohmann::json to_json() const;
};

class FaultReader {
 public:
  // One line of the job's output (without its newline), read at `at`.
  void read(const std::string& line, Clock::time_point at);
  // The most telling fault read so far (kind none when there was none).
  const RoundFault& fault() const { return fault_; }
  // The first training step line read, and its global step; nullopt before it.
  std::optional<Clock::time_point> first_step_at() const { return first_step_at_; }
  int64_t first_step() const { return first_step_; }
  int64_t last_step() const { return last_step_; }

 private:
  void offer(RoundFault fault);

  RoundFault fault_;
  std::optional<Clock::time_point> first_step_at_;
  int64_t first_step_ = -1;
  int64_t last_step_ = -1;
};

}  // namespace sluice::supervisor
