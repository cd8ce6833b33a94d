// What ended a supervised round and what the next round leaves out (supervisor/round_fault.h,
// supervisor/host_roster.h). The lines are those mpirun 4.1, srun and sluice print (copied from
// real runs: tests/launcher/test_in_job_restart.cpp, tests/netns and tests/slurm read them live).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "supervisor/host_roster.h"
#include "supervisor/round_fault.h"

namespace sluice::supervisor {
namespace {

RoundFault read_lines(const std::vector<std::string>& lines) {
  FaultReader reader;
  for (const auto& line : lines) reader.read(line, Clock::now());
  return reader.fault();
}

TEST(RestartFaultReading, MpirunsSignalLineNamesRankHostAndSignal) {
  const RoundFault f = read_lines(
      {"[04:10:01.123] [0@box] [runtime] [info] step 6/18 (epoch 0) loss 3.2 lr 1e-4 | 12 samples/s",
       "mpirun noticed that process rank 2 with PID 4242 on node box exited on signal 9 (Killed)."});
  EXPECT_EQ(f.kind, FaultKind::killed);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.host, "box");
  EXPECT_EQ(f.signal, 9);
  EXPECT_TRUE(f.hardware_looking());
  EXPECT_EQ(f.describe(), "rank 2 (host box) was killed by signal 9 (Killed)");
}

TEST(RestartFaultReading, ASilentRankOutranksTheExitsAndKillsThatFollowIt) {
  const RoundFault f = read_lines(
      {"[1@node0] [runtime] [warning] rank 3 (host node1) has given no sign of life for 2.0 s",
       "[1@node0] [launcher] [error] transport error: timed out in the gradient all-reduce: rank 3 (host node1) "
       "gave no sign of life for 4.1 s (runtime.timeout_s = 4): it is stopped, dead or cut off from this rank",
       "mpirun noticed that process rank 3 with PID 77 on node node1 exited on signal 9 (Killed).",
       "srun: error: node1: task 1: Exited with exit code 1"});
  EXPECT_EQ(f.kind, FaultKind::silent);
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.host, "node1");
  EXPECT_DOUBLE_EQ(f.silent_s, 4.1);
  EXPECT_FALSE(f.hardware_looking());
}

// runtime.timeouts: measured (runtime/train/progress_watchdog.cpp): a rank whose heartbeat beats
// but whose training made no progress names itself; the exit and kill lines that follow are its
// consequences. A stopped rank named by the watchdog of a rank waiting on it reads as silent.
TEST(RestartFaultReading, AStuckRankNamedByItsWatchdogOutranksTheExitsThatFollow) {
  const RoundFault f = read_lines(
      {"[2@box] [runtime] [error] rank 2 (host box) is stuck: no progress for 6.3 s at global step 41 (model rank; "
       "progress deadline 5.00 s = runtime.timeout_min_s (runtime.timeout_factor 5.00 x the p99 0.08 s of the last "
       "steps measured is less)), while its heartbeat still beats; its training thread (tid 4243) is stopped by a "
       "tracer (a debugger)",
       "mpirun noticed that process rank 2 with PID 4242 on node box exited on non-zero status 1",
       "mpirun noticed that process rank 1 with PID 4241 on node box exited on signal 9 (Killed)."});
  EXPECT_EQ(f.kind, FaultKind::stuck);
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.host, "box");
  EXPECT_DOUBLE_EQ(f.stuck_s, 6.3);
  EXPECT_FALSE(f.hardware_looking());
  EXPECT_EQ(f.describe(), "rank 2 (host box) made no progress for 6.3 s (stuck)");
  EXPECT_EQ(f.to_json()["kind"], "stuck");
  EXPECT_DOUBLE_EQ(f.to_json()["stuck_s"].get<double>(), 6.3);

  const RoundFault stopped = read_lines(
      {"[1@box] [runtime] [error] rank 1 (host box) made no progress for 5.4 s at global step 17, waiting: its batch "
       "from its data rank (progress deadline 5.00 s = runtime.timeout_min_s): rank 0 (host box) gave no sign of "
       "life for 5.2 s: it is stopped, dead or cut off from this rank"});
  EXPECT_EQ(stopped.kind, FaultKind::silent);
  EXPECT_EQ(stopped.rank, 0) << "the stopped rank, not the one that waited on it";
  EXPECT_DOUBLE_EQ(stopped.silent_s, 5.2);
}

// Under srun a killed task's peers get SIGTERM at once and name it silent after a few heartbeat
// intervals (Heartbeat::lost, "this rank stopping on SIGTERM"): the kill is the cause, whichever
// line comes first; alone, such a silence is still the fault.
TEST(RestartFaultReading, ASilenceNamedWhileStoppingRanksBelowTheKillThatCausedIt) {
  const std::string after_stop =
      "[17:12:08.399] [rank 2 @ vm] [launcher] [error] transport error: timed out in the bucketed gradient "
      "all-reduce: rank 1 (host vm) gave no sign of life for 2.5 s (runtime.timeout_s = 120), this rank stopping "
      "on SIGTERM (a stop is agreed with live peers only: it is not waited for any longer): it is stopped, dead or "
      "cut off from this rank";
  for (const auto& lines : {std::vector<std::string>{"srun: error: vm: task 1: Killed", after_stop},
                            std::vector<std::string>{after_stop, "srun: error: vm: task 1: Killed"}}) {
    const RoundFault f = read_lines(lines);
    EXPECT_EQ(f.kind, FaultKind::killed);
    EXPECT_EQ(f.rank, 1);
    EXPECT_TRUE(f.hardware_looking());
  }
  const RoundFault alone = read_lines({after_stop, "srun: error: vm: tasks 0,2: Exited with exit code 1"});
  EXPECT_EQ(alone.kind, FaultKind::silent);
  EXPECT_TRUE(alone.after_stop);
  EXPECT_EQ(alone.rank, 1);
  EXPECT_DOUBLE_EQ(alone.silent_s, 2.5);
}

TEST(RestartFaultReading, SrunsTaskLinesAndNodeFailure) {
  RoundFault f = read_lines({"srun: error: c17: task 5: Killed", "srun: error: c17: tasks 0-4,6: Killed"});
  EXPECT_EQ(f.kind, FaultKind::killed);
  EXPECT_EQ(f.rank, 5) << "the first task named, not the ones srun killed after it";
  EXPECT_EQ(f.host, "c17");
  EXPECT_EQ(f.signal, 9);
  f = read_lines({"srun: error: c03: task 2: Exited with exit code 1"});
  EXPECT_EQ(f.kind, FaultKind::exited);
  EXPECT_EQ(f.exit_code, 1);
  f = read_lines({"srun: error: c03: task 2: Exited with exit code 1", "srun: error: Node failure on c09"});
  EXPECT_EQ(f.kind, FaultKind::lost);
  EXPECT_EQ(f.host, "c09");
}

TEST(RestartFaultReading, MpirunsLostDaemonNamesTheRemoteNode) {
  const RoundFault f = read_lines({"ORTE has lost communication with a remote daemon.", "",
                                   "  HNP daemon   : [[4711,0],0] on node node0",
                                   "  Remote daemon: [[4711,0],1] on node node1"});
  EXPECT_EQ(f.kind, FaultKind::lost);
  EXPECT_EQ(f.host, "node1");
}

TEST(RestartFaultReading, TheFirstStepLineIsWhenTrainingGoesOn) {
  FaultReader reader;
  const auto t0 = Clock::now();
  reader.read("resuming from step-0000000010.pt", t0);
  EXPECT_FALSE(reader.first_step_at());
  reader.read("[0@box] [runtime] [info] step 11/40 (epoch 1) loss 2.1", t0 + std::chrono::seconds(3));
  reader.read("[0@box] [runtime] [info] step 12/40 (epoch 1) loss 2.0", t0 + std::chrono::seconds(4));
  ASSERT_TRUE(reader.first_step_at());
  EXPECT_EQ(*reader.first_step_at(), t0 + std::chrono::seconds(3));
  EXPECT_EQ(reader.first_step(), 11);
  EXPECT_EQ(reader.last_step(), 12);
  EXPECT_EQ(reader.fault().kind, FaultKind::none);
}

RoundFault fault(FaultKind kind, const std::string& host) {
  RoundFault f;
  f.kind = kind;
  f.host = host;
  f.rank = 1;
  return f;
}

TEST(RestartHostRoster, AHostNamedTwiceIsLeftOut) {
  HostRoster roster("a:3,b:3,c:3", -1);
  EXPECT_EQ(roster.kept_model_ranks(), 6);  // one data rank a host
  EXPECT_FALSE(roster.count(fault(FaultKind::silent, "b"), 2, 1));
  EXPECT_FALSE(roster.count(fault(FaultKind::exited, "c"), 2, 1));
  const auto left = roster.count(fault(FaultKind::silent, "b"), 2, 1);
  ASSERT_TRUE(left);
  EXPECT_EQ(*left, "b");
  EXPECT_EQ(roster.kept_list(), "a:3,c:3");
  EXPECT_EQ(roster.left_out_list(), "b");
  EXPECT_EQ(roster.kept_ranks(), 6);
  EXPECT_EQ(roster.kept_model_ranks(), 4);
  EXPECT_EQ(roster.uniform_slots(), 3);
}

TEST(RestartHostRoster, OneKilledRankLeavesItsHostOutWhereTheRestSuffice) {
  HostRoster roster("a:2,b:2", -1);
  const auto left = roster.count(fault(FaultKind::killed, "b"), 2, 1);
  ASSERT_TRUE(left);
  EXPECT_EQ(roster.kept_list(), "a:2");
  EXPECT_EQ(roster.kept_model_ranks(), 1);
  // On the last host a kill is retried there (a hint, not proof); a second one leaves it out,
  // and the round below the minimum is the supervisor's to refuse.
  EXPECT_FALSE(roster.count(fault(FaultKind::killed, "a"), 2, 1));
  EXPECT_TRUE(roster.count(fault(FaultKind::killed, "a"), 2, 1));
  EXPECT_EQ(roster.kept_model_ranks(), 0);
}

TEST(RestartHostRoster, NoHostListOrAnUnknownHostLeavesNothingOut) {
  HostRoster none("", -1);
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.count(fault(FaultKind::killed, "a"), 1, 1));
  HostRoster roster("a:4", 0);
  EXPECT_EQ(roster.kept_model_ranks(), 4);  // --data-per-node 0: every rank a model rank
  EXPECT_FALSE(roster.count(fault(FaultKind::killed, "elsewhere"), 1, 1));
  EXPECT_FALSE(roster.count(fault(FaultKind::silent, "a"), 0, 1)) << "--leave-out-after 0: never by count";
  EXPECT_EQ(HostRoster("a:2,b:3", -1).uniform_slots(), 0) << "no --ntasks-per-node for srun";
}

TEST(RestartHostRoster, AMalformedListIsRefusedNamingTheItem) {
  EXPECT_THROW(HostRoster("a:0", -1), ConfigError);
  EXPECT_THROW(HostRoster("a:x", -1), ConfigError);
  EXPECT_THROW(HostRoster("a:2,a:2", -1), ConfigError);
}

}  // namespace
}  // namespace sluice::supervisor
