#include "runtime/train/progress_watchdog.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "common/clock.h"
#include "common/heartbeat.h"
#include "common/log.h"

namespace sluice::runtime {
namespace {

using nlohmann::json;

constexpr auto tick = std::chrono::milliseconds(100);
std::atomic<ProgressWatchdog*> process_watchdog{nullptr};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), seconds < 10 ? "%.2f" : "%.1f", seconds);
  return text;
}

const char* phase_name(ProgressWatchdog::Phase phase) {
  switch (phase) {
    case ProgressWatchdog::Phase::steps: return "steps";
    case ProgressWatchdog::Phase::checkpoint: return "checkpoint";
    case ProgressWatchdog::Phase::validation: return "validation";
    case ProgressWatchdog::Phase::done: return "done";
  }
  return "steps";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MeasuredDeadline

void MeasuredDeadline::add(double seconds) {
  ++measured_;
  if (measured_ <= warmup_) return;  // start-up's steps: counted, not kept
  recent_.push_back(seconds);
  if (recent_.size() > window) recent_.pop_front();
}

double MeasuredDeadline::p99_s() const {
  if (recent_.empty()) return 0;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double MeasuredDeadline::deadline_s() const {
  if (!warmed_up()) return timeouts_.startup_s;
  return std::max(timeouts_.min_s, timeouts_.factor * p99_s());
}

json MeasuredDeadline::to_json() const {
  const char* from = !warmed_up() ? "startup_timeout_s"
                     : timeouts_.factor * p99_s() > timeouts_.min_s ? "measured" : "timeout_min_s";
  return {{"measured", measured_},   {"warmup", warmup_},           {"p99_s", p99_s()},
          {"factor", timeouts_.factor}, {"min_s", timeouts_.min_s},  {"startup_s", timeouts_.startup_s},
          {"deadline_s", deadline_s()}, {"from", from}};
}

// ---------------------------------------------------------------------------------------------
// ProgressWatchdog

// What the watchdog read of the training thread's state, at once.
struct ProgressWatchdog::Judged {
  Phase phase = Phase::steps;
  int64_t step = -1;
  double own_s = 0;
  bool waiting = false;
  double waited_s = 0;
  const char* what = "";
  json deadline;  // MeasuredDeadline::to_json() of the phase's
};

ProgressWatchdog::ProgressWatchdog(const MpiSession& session, const ProgressTimeouts& timeouts, std::string role,
                                   double abort_grace_s)
    : session_(session), timeouts_(timeouts), role_(std::move(role)), abort_grace_s_(abort_grace_s),
      training_tid_(static_cast<long>(::syscall(SYS_gettid))), training_thread_(std::this_thread::get_id()),
      step_deadline_(timeouts, timeouts.warmup_steps), checkpoint_deadline_(timeouts, 0),
      validation_deadline_(timeouts, 0) {
  segment_start_ns_ = now_ns();
  thread_ = std::thread([this] { loop(); });
  process_watchdog = this;
}

ProgressWatchdog::~ProgressWatchdog() {
  if (process_watchdog.load() == this) process_watchdog = nullptr;
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_requested_.notify_all();
  thread_.join();
}

ProgressWatchdog* ProgressWatchdog::process() { return process_watchdog.load(); }

ProgressWatchdog::PhaseScope::PhaseScope(ProgressWatchdog* watchdog, Phase phase) : watchdog_(watchdog) {
  if (watchdog_ != nullptr) watchdog_->begin_phase(phase);
}

ProgressWatchdog::PhaseScope::~PhaseScope() {
  if (watchdog_ != nullptr) watchdog_->end_phase();
}

void ProgressWatchdog::stepped(int64_t global_step) {
  const int64_t now = now_ns();
  const int64_t own = own_before_ns_.load() + (now - segment_start_ns_.load());
  write_begin();
  step_ = global_step;
  segment_start_ns_ = now;
  own_before_ns_ = 0;
  write_end();
  std::lock_guard<std::mutex> lock(deadlines_mutex_);
  step_deadline_.add(static_cast<double>(own) * 1e-9);
}

void ProgressWatchdog::begin_phase(Phase phase) {
  write_begin();
  phase_ = static_cast<int>(phase);
  own_before_ns_ = 0;
  segment_start_ns_ = now_ns();
  write_end();
}

void ProgressWatchdog::end_phase() {
  const int64_t now = now_ns();
  const auto phase = static_cast<Phase>(phase_.load());
  const int64_t own = own_before_ns_.load() + (now - segment_start_ns_.load());
  write_begin();
  phase_ = static_cast<int>(Phase::steps);
  own_before_ns_ = 0;
  segment_start_ns_ = now;
  write_end();
  std::lock_guard<std::mutex> lock(deadlines_mutex_);
  if (phase == Phase::checkpoint) checkpoint_deadline_.add(static_cast<double>(own) * 1e-9);
  if (phase == Phase::validation) validation_deadline_.add(static_cast<double>(own) * 1e-9);
}

void ProgressWatchdog::begin_wait(const std::vector<int>& peers, const char* what) {
  if (wait_depth_++ > 0) return;
  {
    // Every step waits on the same peers (its data rank, the other model ranks): the copy reuses
    // the vector's memory, no allocation per wait.
    std::lock_guard<std::mutex> lock(wait_mutex_);
    if (wait_peers_ != peers) wait_peers_.assign(peers.begin(), peers.end());
  }
  const int64_t now = now_ns();
  write_begin();
  own_before_ns_ = own_before_ns_.load() + (now - segment_start_ns_.load());
  wait_start_ns_ = now;
  wait_what_ = what;
  waiting_ = true;
  write_end();
}

void ProgressWatchdog::end_wait() {
  if (--wait_depth_ > 0) return;
  write_begin();
  waiting_ = false;
  segment_start_ns_ = now_ns();
  write_end();
}

ProgressWatchdog::PeerWait::PeerWait(const std::vector<int>& peers, const char* what) : watchdog_(process()) {
  if (watchdog_ == nullptr) return;
  // Only the watched thread's waits (a one-process rank's feeder thread waits too), and only on
  // other ranks (that rank's wait for its own feeder thread is its own work).
  const int rank = watchdog_->session_.rank();
  const bool others = std::any_of(peers.begin(), peers.end(), [rank](int peer) { return peer != rank; });
  if (!others || std::this_thread::get_id() != watchdog_->training_thread_) {
    watchdog_ = nullptr;
    return;
  }
  watchdog_->begin_wait(peers, what);
}

ProgressWatchdog::PeerWait::~PeerWait() {
  if (watchdog_ != nullptr) watchdog_->end_wait();
}

void ProgressWatchdog::loop() {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  while (!stop_requested_.wait_for(lock, tick, [&] { return stopping_; })) {
    lock.unlock();
    try {
      judge();
    } catch (const std::exception& error) {
      // Judging reads clocks and atomics; a failure here must not end a healthy rank.
      log::get("runtime")->warn("progress watchdog: {}", error.what());
    }
    lock.lock();
  }
}

void ProgressWatchdog::judge() {
  Judged judged;
  // A consistent reading of the training thread's state (the seqlock of the header); a reading
  // that crossed a report is retried at the next tick.
  const uint64_t before = sequence_.load();
  if (before % 2 != 0) return;
  judged.phase = static_cast<Phase>(phase_.load());
  judged.step = step_.load();
  const int64_t own_before = own_before_ns_.load();
  const int64_t segment_start = segment_start_ns_.load();
  judged.waiting = waiting_.load();
  const int64_t wait_start = wait_start_ns_.load();
  judged.what = wait_what_.load();
  if (sequence_.load() != before) return;
  if (judged.phase == Phase::done) return;
  // Another rank failed: this one's waits end on that news, and the job ends with its code.
  if (session_.first_failure(0)) return;
  const int64_t now = now_ns();
  judged.own_s = static_cast<double>(own_before + (judged.waiting ? 0 : now - segment_start)) * 1e-9;
  judged.waited_s = judged.waiting ? static_cast<double>(now - wait_start) * 1e-9 : 0.0;
  double deadline = 0;
  {
    std::lock_guard<std::mutex> lock(deadlines_mutex_);
    const MeasuredDeadline& of_phase = judged.phase == Phase::checkpoint   ? checkpoint_deadline_
                                       : judged.phase == Phase::validation ? validation_deadline_
                                                                            : step_deadline_;
    deadline = of_phase.deadline_s();
    judged.deadline = of_phase.to_json();
  }
  // A training thread stopped inside a wait (a debugger, a tracer) is this rank's own fault.
  if (judged.waiting && judged.waited_s > deadline && training_thread_stopped()) {
    judged.waiting = false;
    judged.own_s += judged.waited_s;
  }
  if (judged.waiting) {
    if (judged.waited_s <= deadline) return;
    // The wait is the peers': only a peer whose heartbeat went silent is named; one that beats
    // is judged by its own watchdog.
    const Heartbeat* heartbeat = Heartbeat::process();
    if (heartbeat == nullptr) return;
    std::vector<int> peers;
    {
      std::lock_guard<std::mutex> lock(wait_mutex_);
      peers = wait_peers_;
    }
    for (int peer : peers) {
      const double silent = heartbeat->silent_s(peer);
      if (peer == session_.rank() || silent <= deadline / 2) continue;
      end_rank(session_.describe(session_.rank()) + " (" + role_ + " rank) made no progress for " +
               seconds_text(judged.waited_s) + " s at global step " + std::to_string(judged.step + 1) +
               ", waiting: " + judged.what + " (" + deadline_text(judged) + "): " + session_.describe(peer) +
               " gave no sign of life for " + seconds_text(silent) +
               " s: it is stopped, dead or cut off from this rank (named by runtime.timeouts: measured, before "
               "runtime.timeout_s)");
    }
    return;
  }
  if (judged.own_s <= deadline) return;
  const std::string where = judged.phase == Phase::steps
                                ? "at global step " + std::to_string(judged.step + 1)
                                : std::string("in its ") + phase_name(judged.phase) + " after global step " +
                                      std::to_string(judged.step + 1);
  end_rank(session_.describe(session_.rank()) + " is stuck: no progress for " + seconds_text(judged.own_s) + " s " +
           where + " (" + role_ + " rank; " + deadline_text(judged) + "), while its heartbeat still beats; " +
           training_thread_state() +
           ". A hung GPU kernel, a deadlocked step or a stopped thread: its stack (gdb -p, py-spy dump) says where; "
           "`sluice supervise` restarts the job");
}

std::string ProgressWatchdog::deadline_text(const Judged& judged) const {
  const json& d = judged.deadline;
  const std::string of = judged.phase == Phase::steps ? "steps" : std::string(phase_name(judged.phase)) + "s";
  const std::string deadline = "progress deadline " + seconds_text(d["deadline_s"].get<double>()) + " s";
  const std::string from = d["from"].get<std::string>();
  if (from == "startup_timeout_s") {
    return deadline + " = runtime.startup_timeout_s, " + std::to_string(d["measured"].get<int64_t>()) + " " + of +
           " measured of the " + std::to_string(d["warmup"].get<int64_t>()) + " warm-up ones";
  }
  const std::string measured = "runtime.timeout_factor " + seconds_text(d["factor"].get<double>()) + " x the p99 " +
                               seconds_text(d["p99_s"].get<double>()) + " s of the last " + of + " measured";
  if (from == "timeout_min_s") return deadline + " = runtime.timeout_min_s (" + measured + " is less)";
  return deadline + " = " + measured;
}

char ProgressWatchdog::training_thread_state_code() const {
  std::ifstream in("/proc/self/task/" + std::to_string(training_tid_) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the name in parentheses may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

bool ProgressWatchdog::training_thread_stopped() const {
  const char state = training_thread_state_code();
  return state == 't' || state == 'T';
}

std::string ProgressWatchdog::training_thread_state() const {
  const char state = training_thread_state_code();
  const std::string tid = "its training thread (tid " + std::to_string(training_tid_) + ")";
  switch (state) {
    case 't': return tid + " is stopped by a tracer (a debugger)";
    case 'T': return tid + " is stopped (SIGSTOP)";
    case 'D': return tid + " is in an uninterruptible wait (storage or a driver)";
    case 'R': return tid + " is running (a busy loop, or a wait on the GPU that spins)";
    case 'S': return tid + " sleeps (on a lock or a wait: a deadlock?)";
    default: return tid + " is in state " + std::string(1, state);
  }
}

void ProgressWatchdog::end_rank(const std::string& message) {
  // As launcher/launch.cpp's end_job ends a rank that failed: say it, tell the others (they stop
  // waiting at once and name it), give them the abort grace to write their timelines, abort.
  log::get("runtime")->error("{}", message);
  log::get("runtime")->flush();
  session_.announce_failure(1);
  std::this_thread::sleep_for(std::chrono::duration<double>(abort_grace_s_));
  session_.abort(1);
}

json ProgressWatchdog::to_json() const {
  std::lock_guard<std::mutex> lock(deadlines_mutex_);
  return {{"role", role_},
          {"mode", "measured"},
          {"step", step_deadline_.to_json()},
          {"checkpoint", checkpoint_deadline_.to_json()},
          {"validation", validation_deadline_.to_json()}};
}

}  // namespace sluice::runtime
