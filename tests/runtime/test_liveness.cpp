// Deadlines that tell slow from dead (LIVENESS in common/heartbeat.h), end to end: the real
// `sluice train` binary under mpirun, 3 ranks (rank 0 feeds model ranks 1 and 2), faults made
// from outside the processes:
//  - a model rank held to 2% of a core (cgroup cpu quota; where no cgroup can be made, SIGSTOP /
//    SIGCONT cycles shorter than the deadline) for three deadlines: its steps take longer than
//    runtime.timeout_s, and the run must pass;
//  - a model rank stopped for good (SIGSTOP): named (rank and host) within 2 x runtime.timeout_s
//    by the ranks waiting on it, no innocent rank named, and the job exits non-zero.
// Dead ranks: TrainJob.KilledDataRankEndsTheJobAndIsNamed, FeedPeerExit.*; a stopped data rank:
// TrainJob.SilentDataRankIsNamedAndTheJobEnds.
// runtime.timeouts: measured (runtime/train/progress_watchdog.h), with runtime.timeout_s at its
// default 120 s and deadlines measured from the run (at least runtime.timeout_min_s = 5 s):
//  - a data rank stopped (SIGSTOP) after the warm-up is named by the model ranks waiting on it
//    long before runtime.timeout_s;
//  - a model rank whose training thread alone is stopped (ptrace) while its heartbeat beats is
//    named stuck by its own watchdog;
//  - a model rank slowed step by step (CPU quota 50%, 25%, 12% of a core) finishes.
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double timeout_s = 3.0;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool write(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One `sluice train` job in its own process group, its output in RUN_DIR/output.txt.
class Job {
 public:
  Job(const std::string& command, fs::path run_dir) : run_dir_(std::move(run_dir)), log_(run_dir_ / "output.txt") {
    child_ = ::fork();
    if (child_ == 0) {
      ::setsid();
      const std::string redirected = command + " > " + log_.string() + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", redirected.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Job() {
    ::kill(-child_, SIGKILL);  // whatever is left, including a stopped rank
    if (!ended_) ::waitpid(child_, &status_, 0);
  }

  std::string output() const { return slurp(log_); }
  // Waits until the output matches `text` (or the job ends, or `seconds` pass).
  bool wait_for(const std::string& text, double seconds) {
    const auto start = Clock::now();
    while (since(start) < seconds) {
      if (output().find(text) != std::string::npos) return true;
      if (ended()) return output().find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  bool ended() {
    if (!ended_ && ::waitpid(child_, &status_, WNOHANG) == child_) ended_ = true;
    return ended_;
  }
  // The exit code once the job ended within `seconds`; -1 if it did not.
  int exit_code(double seconds) {
    const auto start = Clock::now();
    while (!ended() && since(start) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!ended_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  // The pid of MPI rank `rank` of this job.
  pid_t rank_pid(int rank) const {
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string cmd = slurp(entry.path() / "cmdline");
      if (cmd.find(run_dir_.string()) == std::string::npos || cmd.rfind(SLUICE_BINARY, 0) != 0) continue;
      if (slurp(entry.path() / "environ").find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') !=
          std::string::npos) {
        return std::stoi(name);
      }
    }
    return -1;
  }

 private:
  fs::path run_dir_, log_;
  pid_t child_ = -1;
  int status_ = -1;
  bool ended_ = false;
};

// Holds a process to `percent` of one core with a cgroup CPU quota (v2 cpu.max, else v1
// cpu.cfs_quota_us). available() is false where no cgroup can be made here.
class CpuQuota {
 public:
  explicit CpuQuota(const std::string& name) {
    const fs::path v2 = "/sys/fs/cgroup";
    const fs::path v1 = "/sys/fs/cgroup/cpu";
    std::error_code ignored;
    if (slurp(v2 / "cgroup.controllers").find("cpu") != std::string::npos) {
      write(v2 / "cgroup.subtree_control", "+cpu");
      if (fs::create_directory(v2 / name, ignored) && fs::exists(v2 / name / "cpu.max")) {
        root_ = v2, dir_ = v2 / name, v2_ = true;
      }
    } else if (fs::exists(v1 / "cpu.cfs_quota_us") && fs::create_directory(v1 / name, ignored)) {
      root_ = v1, dir_ = v1 / name;
    }
  }
  ~CpuQuota() {
    if (held_ > 0) release();
    std::error_code ignored;
    if (!dir_.empty()) fs::remove(dir_, ignored);
  }
  bool available() const { return !dir_.empty(); }
  bool hold(pid_t pid, int percent) {
    const int period = 100000, quota = period * percent / 100;
    const bool set = v2_ ? write(dir_ / "cpu.max", std::to_string(quota) + " " + std::to_string(period))
                         : write(dir_ / "cpu.cfs_period_us", std::to_string(period)) &&
                               write(dir_ / "cpu.cfs_quota_us", std::to_string(quota));
    held_ = pid;
    return set && write(dir_ / "cgroup.procs", std::to_string(pid));
  }
  void release() {
    write(root_ / "cgroup.procs", std::to_string(held_));
    held_ = -1;
  }
  // How often the quota throttled the process: > 0 proves it was held.
  long throttled() const {
    const std::string stat = slurp(dir_ / "cpu.stat");
    const auto at = stat.find("nr_throttled ");
    return at == std::string::npos ? -1 : std::stol(stat.substr(at + 13));
  }

 private:
  fs::path root_, dir_;
  bool v2_ = false;
  pid_t held_ = -1;
};

class Liveness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = test::scratch_dir("liveness-test", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }

  // 3 ranks with CI-sized settings (tiny model, 2 buckets) and runtime.timeout_s = 3.
  static std::string train(const fs::path& run_dir, int steps) {
    return std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 3 " + SLUICE_BINARY +
           " train --cache " + cache_.string() + " --run-dir " + run_dir.string() + " --steps " +
           std::to_string(steps) +
           " --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10 --set train.log_every=5"
           " --set runtime.timeout_s=" + std::to_string(timeout_s);
  }

  // The same job with runtime.timeouts: measured, the heartbeat's runtime.timeout_s at 120 s.
  static std::string train_measured(const fs::path& run_dir, int steps) {
    return std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 3 " + SLUICE_BINARY +
           " train --cache " + cache_.string() + " --run-dir " + run_dir.string() + " --steps " +
           std::to_string(steps) +
           " --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10 --set train.log_every=5"
           " --set runtime.timeout_s=120 --set runtime.timeouts=measured --set runtime.timeout_min_s=5"
           " --set runtime.timeout_warmup_steps=10";
  }

  // The same job with runtime.timeout_s at its default 120 s and fixed deadlines (the heartbeat only).
  static std::string train_patient(const fs::path& run_dir, int steps) {
    return std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 3 " + SLUICE_BINARY +
           " train --cache " + cache_.string() + " --run-dir " + run_dir.string() + " --steps " +
           std::to_string(steps) +
           " --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10 --set train.log_every=5"
           " --set runtime.timeout_s=120";
  }

  static fs::path cache_;
};
fs::path Liveness::cache_;

// The last `step N/` line's N in `output` (the first model rank logs every train.log_every steps).
int last_logged_step(const std::string& output) {
  const auto at = output.rfind("] step ");
  return at == std::string::npos ? -1 : std::atoi(output.c_str() + at + 7);
}

// The line of `output` that holds `text`, or "".
std::string line_with(const std::string& output, const std::string& text) {
  const auto at = output.find(text);
  if (at == std::string::npos) return "";
  const auto begin = output.rfind('\n', at);
  const auto end = output.find('\n', at);
  return output.substr(begin == std::string::npos ? 0 : begin + 1,
                       (end == std::string::npos ? output.size() : end) - (begin == std::string::npos ? 0 : begin + 1));
}

// SIGSTOP / SIGCONT cycles, each stop shorter than the deadline, for `seconds`: a rank whose
// steps take long, where no cgroup can hold it to a CPU share.
void stop_in_cycles(pid_t pid, double seconds) {
  const auto start = Clock::now();
  while (since(start) < seconds) {
    ::kill(pid, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::duration<double>(0.6 * timeout_s));
    ::kill(pid, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A model rank whose steps take longer than runtime.timeout_s (held to 2% of a core for three
// deadlines) never fails the run: the other model rank waits for it in the gradient all-reduce,
// the data rank for its credits, both longer than the deadline, and the run finishes.
TEST_F(Liveness, ModelRankSlowerThanTheDeadlineNeverFailsTheRun) {
  const fs::path run_dir = test::scratch_dir("liveness-test", "slow");
  constexpr int steps = 12;  // 5 before the hold, the rest after: short on a 2-core CI
  Job job(train(run_dir, steps), run_dir);
  ASSERT_TRUE(job.wait_for("step 5/", 180)) << "the run did not reach step 5:\n" << job.output();
  const pid_t slow = job.rank_pid(2);
  ASSERT_GT(slow, 0) << job.output();
  CpuQuota quota("sluice-liveness-" + std::to_string(::getpid()));
  const double held_s = 3 * timeout_s;
  if (quota.available()) {
    ASSERT_TRUE(quota.hold(slow, 2)) << "could not hold rank 2 to 2% of a core";
    std::this_thread::sleep_for(std::chrono::duration<double>(held_s));
    EXPECT_GT(quota.throttled(), 0) << "the quota never throttled rank 2";
    quota.release();
  } else {
    std::printf("no cgroup can be made here: SIGSTOP/SIGCONT cycles instead of a CPU quota\n");
    stop_in_cycles(slow, held_s);
  }
  const int code = job.exit_code(240);
  const std::string output = job.output();
  ASSERT_EQ(code, 0) << output;
  EXPECT_EQ(output.find("[error]"), std::string::npos) << output;
  const json rank1 = json::parse(slurp(run_dir / "ranks" / "rank-1.json"));
  const json rank2 = json::parse(slurp(run_dir / "ranks" / "rank-2.json"));
  EXPECT_EQ(rank2["steps"], steps);
  // Rank 1 waited for the slow rank in the all-reduce for longer than the deadline, and that
  // wait did not fail.
  EXPECT_GT(rank1["allreduce_exposed_seconds"].get<double>(), timeout_s) << rank1.dump(2);
}

// A model rank stopped for good is named, with its host, within 2 x runtime.timeout_s; the ranks
// that wait on it (its data rank, the other model rank in the all-reduce) are not blamed.
TEST_F(Liveness, StoppedModelRankIsNamedWithinTwiceTheDeadline) {
  const fs::path run_dir = test::scratch_dir("liveness-test", "stopped");
  Job job(train(run_dir, 100000), run_dir);
  ASSERT_TRUE(job.wait_for("step 5/", 180)) << "the run did not reach step 5:\n" << job.output();
  const pid_t stopped = job.rank_pid(2);
  ASSERT_GT(stopped, 0) << job.output();
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  const bool named = job.wait_for("[error] transport error", 4 * timeout_s);
  const double named_after = since(sent);
  const int code = job.exit_code(60);
  const std::string output = job.output();
  ASSERT_TRUE(named) << output;
  EXPECT_LE(named_after, 2 * timeout_s) << output;
  EXPECT_EQ(code, 1) << output;  // a rank that gave no sign of life (docs/operations.md, exit codes)
  EXPECT_NE(output.find("rank 2 (host "), std::string::npos) << output;
  // Every "gave no sign of life" names rank 2: none names rank 0 or 1, which were only waiting.
  size_t blamed = 0;
  for (auto at = output.find(" gave no sign of life"); at != std::string::npos;
       at = output.find(" gave no sign of life", at + 1)) {
    const auto line = output.rfind('\n', at);
    const std::string before = output.substr(line == std::string::npos ? 0 : line, at - line);
    const auto rank_at = before.rfind("rank ");
    ASSERT_NE(rank_at, std::string::npos) << before;
    EXPECT_EQ(before.substr(rank_at, 7), "rank 2 ") << before;
    ++blamed;
  }
  EXPECT_GT(blamed, 0u) << output;
}

// A data rank stopped for good after the warm-up: its model ranks wait for their batches past
// their measured deadline, find it silent, and name it (rank and host) in seconds, not after
// runtime.timeout_s (120 s); the job exits 1.
TEST_F(Liveness, TimeoutMeasuredNamesAStoppedDataRankLongBeforeTimeoutS) {
  const fs::path run_dir = test::scratch_dir("liveness-test", "measured-stopped-data");
  Job job(train_measured(run_dir, 100000), run_dir);
  ASSERT_TRUE(job.wait_for("step 15/", 240)) << "the run did not reach step 15:\n" << job.output();
  const pid_t stopped = job.rank_pid(0);
  ASSERT_GT(stopped, 0) << job.output();
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  const bool named = job.wait_for("[error] rank ", 100);
  const double named_after = since(sent);
  const int code = job.exit_code(60);
  const std::string output = job.output();
  ASSERT_TRUE(named) << output;
  std::printf("the stopped data rank was named %.1f s after its SIGSTOP (runtime.timeout_s 120); the job exited %d\n",
              named_after, code);
  EXPECT_LT(named_after, 60) << "not named well before runtime.timeout_s:\n" << output;
  // The naming rank aborts with 1; no rank unwinding an all-reduce in flight crashes first (139, before
  // the reducer kept what a collective in flight uses: mpi_gradient_reducer.cpp).
  EXPECT_EQ(code, 1) << output;
  const std::string line = line_with(output, "[error] rank ");
  EXPECT_NE(line.find("rank 0 (host "), std::string::npos) << line;
  EXPECT_NE(line.find(" gave no sign of life for "), std::string::npos) << line;
  EXPECT_NE(line.find("waiting: its batch from its data rank"), std::string::npos) << line;
  EXPECT_NE(line.find("progress deadline "), std::string::npos) << line;
  // Only rank 0 is named silent: the model ranks were only waiting on it.
  for (auto at = output.find(" gave no sign of life"); at != std::string::npos;
       at = output.find(" gave no sign of life", at + 1)) {
    const auto begin = output.rfind(':', at);
    EXPECT_NE(output.substr(begin, at - begin).find("rank 0 (host "), std::string::npos)
        << output.substr(begin, at - begin);
  }
}

// What srun does when a task dies: SIGTERM to the other tasks, then SIGKILL after KillWait (30 s by
// default). Here model rank 2 is stopped for good (SIGSTOP) and the two others get SIGTERM: a stop is
// agreed with live peers only, so they name rank 2 within a few heartbeat intervals
// (Heartbeat::stopping_silence_s, 2.5 s at runtime.timeout_s 120) and the job exits 1, instead of
// waiting runtime.timeout_s (120 s here; under srun, into the SIGKILL with nothing written).
TEST_F(Liveness, AStopSignalDoesNotWaitForASilentPeer) {
  const fs::path run_dir = test::scratch_dir("liveness-test", "stop-with-silent-peer");
  Job job(train_patient(run_dir, 100000), run_dir);
  ASSERT_TRUE(job.wait_for("step 10/", 240)) << "the run did not reach step 10:\n" << job.output();
  const pid_t stopped = job.rank_pid(2), data = job.rank_pid(0), model = job.rank_pid(1);
  ASSERT_GT(stopped, 0) << job.output();
  ASSERT_GT(data, 0) << job.output();
  ASSERT_GT(model, 0) << job.output();
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto sent = Clock::now();
  ASSERT_EQ(::kill(data, SIGTERM), 0);
  ASSERT_EQ(::kill(model, SIGTERM), 0);
  const bool named = job.wait_for(" gave no sign of life for ", 100);
  const double named_after = since(sent);
  const int code = job.exit_code(60);
  const double ended_after = since(sent);
  const std::string output = job.output();
  ASSERT_TRUE(named) << output;
  std::printf("after SIGTERM the silent rank was named in %.1f s and the job exited %d in %.1f s "
              "(runtime.timeout_s 120)\n", named_after, code, ended_after);
  EXPECT_LT(named_after, 20) << output;
  EXPECT_EQ(code, 1) << output;
  const std::string line = line_with(output, " gave no sign of life for ");
  EXPECT_NE(line.find("rank 2 (host "), std::string::npos) << line;
  EXPECT_NE(line.find("this rank stopping on SIGTERM"), std::string::npos) << line;
  // Only rank 2 is named: ranks 0 and 1 got the signal and beat on.
  for (auto at = output.find(" gave no sign of life"); at != std::string::npos;
       at = output.find(" gave no sign of life", at + 1)) {
    const auto rank_at = output.rfind("rank ", at);
    EXPECT_EQ(output.substr(rank_at, 7), "rank 2 ") << output;
  }
}

// A model rank whose training thread alone is stopped (ptrace: PTRACE_SEIZE and PTRACE_INTERRUPT
// of its main thread, leaving its heartbeat thread beating): the heartbeat would wait on it for
// ever; its own progress watchdog names it stuck, with its training thread's state, and the job
// exits 1. The ranks waiting on it (its data rank, the other model rank) are not named.
TEST_F(Liveness, TimeoutMeasuredNamesAModelRankStuckWhileItsHeartbeatBeats) {
  const fs::path run_dir = test::scratch_dir("liveness-test", "measured-stuck-model");
  Job job(train_measured(run_dir, 100000), run_dir);
  ASSERT_TRUE(job.wait_for("step 15/", 240)) << "the run did not reach step 15:\n" << job.output();
  const pid_t rank2 = job.rank_pid(2);
  ASSERT_GT(rank2, 0) << job.output();
  // The main thread's tid is the process id; the other threads (heartbeat, watchdog, torch) run on.
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, rank2, nullptr, nullptr), 0) << "ptrace(PTRACE_SEIZE): " << std::strerror(errno);
  // Let go of the thread once it is named (or the test ends): a traced process that dies is
  // reported to its tracer first, and mpirun would wait for it.
  struct Detach {
    explicit Detach(pid_t traced) : tid(traced) {}
    ~Detach() { ::ptrace(PTRACE_DETACH, tid, nullptr, nullptr); }
    Detach(const Detach&) = delete;
    Detach& operator=(const Detach&) = delete;
    pid_t tid;
  };
  std::optional<Detach> detach(std::in_place, rank2);
  const auto sent = Clock::now();
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, rank2, nullptr, nullptr), 0) << std::strerror(errno);
  const bool named = job.wait_for(" is stuck: no progress for ", 100);
  const double named_after = since(sent);
  detach.reset();
  const int code = job.exit_code(60);
  const std::string output = job.output();
  ASSERT_TRUE(named) << output;
  std::printf("the model rank whose training thread was stopped was named stuck %.1f s after; the job exited %d\n",
              named_after, code);
  EXPECT_LT(named_after, 60) << output;
  // Rank 2 aborts with 1. Rank 1 unwinds the all-reduce it was in when rank 2 announced its failure;
  // it crashed in Open MPI's libnbc progress (exit 139 in 3 of 5 runs) while it freed the reduction's
  // request and communicator, which the reducer now keeps (mpi_gradient_reducer.cpp).
  EXPECT_EQ(code, 1) << output;
  const std::string line = line_with(output, " is stuck: no progress for ");
  EXPECT_NE(line.find("rank 2 (host "), std::string::npos) << line;
  EXPECT_NE(line.find("while its heartbeat still beats"), std::string::npos) << line;
  EXPECT_NE(line.find("stopped by a tracer"), std::string::npos) << line;
  for (auto at = output.find(" is stuck: "); at != std::string::npos; at = output.find(" is stuck: ", at + 1)) {
    const auto rank_at = output.rfind("rank ", at);
    EXPECT_EQ(output.substr(rank_at, 7), "rank 2 ") << "only rank 2 is stuck:\n" << output;
  }
  // Its heartbeat beat: a rank waiting on it names none silent (unless rank 2's stop held an MPI
  // lock its heartbeat thread needed: then rank 2 is the one named silent, by the ranks waiting on it).
  for (auto at = output.find(" gave no sign of life"); at != std::string::npos;
       at = output.find(" gave no sign of life", at + 1)) {
    const auto rank_at = output.rfind("rank ", at);
    EXPECT_EQ(output.substr(rank_at, 7), "rank 2 ") << output;
  }
}

// A model rank slowed step by step (CPU quota 50%, then 25%, then 12% of a core, each for five
// logged steps) while the deadlines are measured: its deadline follows its step times, nobody is
// named, and the run finishes with exit 0.
TEST_F(Liveness, TimeoutMeasuredLetsASlowedButHealthyRunFinish) {
  const fs::path run_dir = test::scratch_dir("liveness-test", "measured-slowed");
  constexpr int steps = 60;  // 15 at full speed, then at least 5 at each quota
  Job job(train_measured(run_dir, steps), run_dir);
  ASSERT_TRUE(job.wait_for("step 15/", 240)) << "the run did not reach step 15:\n" << job.output();
  const pid_t slow = job.rank_pid(2);
  ASSERT_GT(slow, 0) << job.output();
  CpuQuota quota("sluice-liveness-measured-" + std::to_string(::getpid()));
  if (!quota.available()) GTEST_SKIP() << "no cgroup can be made here to hold a rank to a CPU quota";
  for (const int percent : {50, 25, 12}) {
    ASSERT_TRUE(quota.hold(slow, percent)) << "could not hold rank 2 to " << percent << "% of a core";
    const int from = last_logged_step(job.output());
    // Five more steps at this share (one log line), or the end of the run.
    while (!job.ended() && last_logged_step(job.output()) < from + 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("step %d at %d%% of a core\n", last_logged_step(job.output()), percent);
  }
  EXPECT_GT(quota.throttled(), 0) << "the quota never throttled rank 2";
  quota.release();
  const int code = job.exit_code(240);
  const std::string output = job.output();
  ASSERT_EQ(code, 0) << output;
  EXPECT_EQ(output.find("[error]"), std::string::npos) << output;
  const json rank2 = json::parse(slurp(run_dir / "ranks" / "rank-2.json"));
  EXPECT_EQ(rank2["steps"], steps);
  // Its deadline was measured (not the start-up one).
  const json& step = rank2["progress_deadline"]["step"];
  EXPECT_NE(step["from"], "startup_timeout_s") << rank2["progress_deadline"].dump(2);
  EXPECT_GT(step["measured"].get<int64_t>(), 10) << step.dump(2);
  EXPECT_GE(step["deadline_s"].get<double>(), 5.0) << step.dump(2);
  std::printf("rank 2's step deadline at the end: %.2f s (p99 %.3f s over %lld steps)\n",
              step["deadline_s"].get<double>(), step["p99_s"].get<double>(),
              static_cast<long long>(step["measured"].get<int64_t>()));
  const json report = json::parse(slurp(run_dir / "report.json"));
  ASSERT_TRUE(report["progress_deadlines"].is_array()) << report["progress_deadlines"].dump(2);
  EXPECT_EQ(report["progress_deadlines"].size(), 2u) << "one entry a role";
}

}  // namespace
}  // namespace sluice
