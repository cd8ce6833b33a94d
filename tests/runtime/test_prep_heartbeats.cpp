// `sluice prep` across ranks, with ranks stopped from outside (SIGSTOP):
//  - heartbeats go up the rank tree (common/heartbeat_tree.h; common/rank_tree.h),
//    not every rank to rank 0. With 10 ranks the tree has two levels: ranks 1-8 report to rank 0,
//    rank 9 to rank 8. A rank stopped for good below the first level is still named, by its
//    parent's beat, and the job ends with an error that names it;
//  - shards are handed out as ranks ask (prep_plan.h, ShardDispenser): a rank frozen for a while
//    writes fewer shards, the others take on the rest, and the job ends well and complete; a
//    stopped rank 0, which hands them out, is named within the deadline and finished shards stay.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "common/rank_tree.h"
#include "tests/support/command.h"
#include "tests/support/interrupt_ranks.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// `sluice prep` of the sample corpus into CACHE on RANKS ranks with SETTINGS (" --set ..."), and
// beside it a watcher that prints SHARDS-BEING-WRITTEN once TEMPORARIES shard files are being
// written: the moment interrupt_ranks() waits for. mpirun may run as root (CI does).
std::string prep_once_shards_are_written(const fs::path& cache, int ranks, const std::string& settings,
                                         int temporaries) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  const std::string command = std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np " +
                              std::to_string(ranks) + " " + SLUICE_BINARY + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                              " --out " + cache.string() + settings;
  const std::string watcher = "for i in $(seq 1200); do [ $(ls " + cache.string() + " 2>/dev/null | grep -c 'h5.tmp-') -ge " +
                              std::to_string(temporaries) + " ] && { echo SHARDS-BEING-WRITTEN; break; }; sleep 0.05; done";
  return "{ " + watcher + " & " + command + "; }";
}

TEST(PrepHeartbeats, TheTreeHasTwoLevelsAtTenRanks) {
  EXPECT_EQ(RankTree::parent(9), 8);
  EXPECT_EQ(RankTree::parent(8), 0);
  EXPECT_EQ(RankTree::children(8, 10), (std::vector<int>{9}));
  EXPECT_EQ(RankTree::children(0, 10).size(), 8u);  // ranks 1-8
}

TEST(PrepHeartbeats, AStoppedRankBelowTheFirstLevelIsNamedThroughItsParent) {
  const fs::path dir = test::scratch_dir("prep-heartbeat-test", "stopped-leaf");
  // Slow decodes (1 s a clip, 8-16 clips a rank) keep every rank busy long after rank 9 stops;
  // the 4 s deadline then names it well before the job would have ended.
  // Rank 9 is stopped once every rank writes a shard (10 temporary shard files): the plan and the
  // clock alignment (rank 0 aligns with one rank after another) are behind every rank then, and
  // only the heartbeats can notice.
  const std::string command = prep_once_shards_are_written(
      dir / "cache", 10,
      " --set cache.shard_size=8 --set prep.threads=1 --set prep.progress_interval_s=0.2"
      " --set runtime.timeout_s=4 --set debug.delay_stage=decode --set debug.delay_ms=1000",
      10);
  const auto stopped = test::interrupt_ranks(command, dir, SIGSTOP, {9}, "SHARDS-BEING-WRITTEN");
  ASSERT_GE(stopped.seconds, 0) << "rank 9 was never found to stop:\n" << stopped.output;
  ASSERT_TRUE(WIFEXITED(stopped.status) || WIFSIGNALED(stopped.status)) << stopped.output;
  EXPECT_FALSE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 0) << stopped.output;
  // Rank 0 names rank 9, from rank 8's report; nobody blames rank 8 or rank 0.
  EXPECT_NE(stopped.output.find("(prep writer) has been silent for"), std::string::npos) << stopped.output;
  EXPECT_NE(stopped.output.find("as its parent rank 8 reports"), std::string::npos) << stopped.output;
  const size_t named = stopped.output.find("(prep writer) has been silent");
  ASSERT_NE(named, std::string::npos);
  const size_t line = stopped.output.rfind('\n', named);
  EXPECT_NE(stopped.output.substr(line + 1, named - line).find("rank 9"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("(prep coordinator) has been silent"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("parent in the prep heartbeat tree) has been silent"), std::string::npos)
      << stopped.output;
}

TEST(PrepBalance, AStoppedCoordinatorIsNamedAndFinishedShardsAreKept) {
  const fs::path dir = test::scratch_dir("prep-heartbeat-test", "stopped-coordinator");
  const fs::path cache = dir / "cache";
  // Rank 0 hands out the shards: stopped for good, rank 1 writes what it holds and then hears
  // neither pings nor shards; within runtime.timeout_s (4 s) it ends the job naming rank 0.
  const std::string command = prep_once_shards_are_written(
      cache, 2,
      " --set cache.shard_size=4 --set prep.threads=1 --set prep.progress_interval_s=0.2"
      " --set runtime.timeout_s=4 --set debug.delay_stage=decode --set debug.delay_ms=50",
      2);
  const auto stopped = test::interrupt_ranks(command, dir, SIGSTOP, {0}, "SHARDS-BEING-WRITTEN");
  ASSERT_GE(stopped.seconds, 0) << "rank 0 was never found to stop:\n" << stopped.output;
  EXPECT_LT(stopped.seconds, 30) << "the job did not end soon after the 4 s deadline:\n" << stopped.output;
  EXPECT_FALSE(WIFEXITED(stopped.status) && WEXITSTATUS(stopped.status) == 0) << stopped.output;
  const bool named = stopped.output.find("rank 0") != std::string::npos &&
                     stopped.output.find("(prep coordinator) has") != std::string::npos;
  EXPECT_TRUE(named) << "rank 1 did not name the stopped coordinator:\n" << stopped.output;
  // What rank 1 finished before it gave up stays, under the final names, for the rerun.
  size_t finished = 0;
  for (const auto& entry : fs::directory_iterator(cache)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".h5") ++finished;
  }
  EXPECT_GE(finished, 1u) << stopped.output;
}

TEST(PrepBalance, ARankFrozenForAWhileWritesFewerShardsAndTheJobEndsComplete) {
  const fs::path dir = test::scratch_dir("prep-heartbeat-test", "frozen-for-a-while");
  const fs::path cache = dir / "cache";
  // 30 shards of 4 rows, 30 ms a row on both ranks (~1.8 s each when both run): long enough that
  // a 3 s freeze of rank 1 lands in the middle. With the shards split up front rank 1 would still
  // owe half of them after it; handed out as asked, rank 0 writes most of them meanwhile.
  const std::string command = prep_once_shards_are_written(
      cache, 2,
      " --set cache.shard_size=4 --set prep.threads=1 --set runtime.timeout_s=30"
      " --set debug.delay_stage=decode --set debug.delay_ms=30",
      2);
  const auto frozen =
      test::interrupt_ranks(command, dir, SIGSTOP, {1}, "SHARDS-BEING-WRITTEN", SLUICE_BINARY, 3.0);
  ASSERT_GE(frozen.seconds, 0) << "rank 1 was never found to stop:\n" << frozen.output;
  ASSERT_TRUE(WIFEXITED(frozen.status)) << frozen.output;
  EXPECT_EQ(WEXITSTATUS(frozen.status), 0) << "a rank frozen for 3 s of a 30 s deadline is slow, not dead:\n"
                                           << frozen.output;

  std::ifstream in(cache / "prep-report.json");
  ASSERT_TRUE(in) << frozen.output;
  const nlohmann::json report = nlohmann::json::parse(in);
  std::map<int, size_t> shards;
  size_t all = 0;
  for (const auto& rank : report["ranks"]) {
    shards[rank["rank"].get<int>()] = rank["shards"].size();
    all += rank["shards"].size();
  }
  EXPECT_EQ(all, 30u) << report.dump();
  EXPECT_GE(shards[1], 1u) << report.dump();
  // Frozen for 3 s of the ~3.6 s both ranks would need together: rank 0 writes well over half.
  EXPECT_GE(shards[0], 20u) << "rank 0 did not take over the frozen rank's shards: " << report.dump();
  EXPECT_TRUE(fs::exists(cache / "manifest.json"));
}

}  // namespace
}  // namespace sluice
