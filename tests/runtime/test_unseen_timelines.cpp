// The end-of-run fallback for a run directory rank 0 cannot see (runtime/rank_timing.cpp,
// write_finished): each rank whose timeline rank 0 does not find at the size it wrote sends it
// over, one at a time, and rank 0 writes it. On one machine every rank sees the same directory,
// so this test makes the real condition: ranks 1 and 2 run in their own mount namespace
// (`unshare --mount`) with a private tmpfs over RUN_DIR/timeline. Their files go to a disk rank 0
// cannot see and vanish with them, as on a node-local disk; everything else in RUN_DIR is shared.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/report_json.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::read_json;

// mpirun runs this for every rank: `private_timeline.sh TIMELINE_DIR COMMAND...`. Rank 0 runs
// COMMAND as it is; every other rank runs it in a new mount namespace with a tmpfs of its own
// mounted over TIMELINE_DIR.
constexpr const char* private_timeline_script = R"(#!/bin/sh
dir=$1
shift
[ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ] && exec "$@"
exec unshare --mount --propagation private -- sh -c 'mount -t tmpfs sluice-private-timeline "$0" && exec "$@"' "$dir" "$@"
)";

class UnseenTimelines : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    cache_ = test::scratch_dir("unseen-test", "cache");
    const auto result = test::run_command(std::string(SLUICE_BINARY) + " prep --corpus " + SLUICE_SAMPLE_CORPUS +
                                          " --out " + cache_.string() + " --set cache.shard_size=32");
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  static fs::path cache_;
};
fs::path UnseenTimelines::cache_;

TEST_F(UnseenTimelines, RanksWhoseFilesRankZeroCannotSeeSendThemAndTheReportCoversEveryRank) {
  // A private tmpfs needs a mount namespace: root, or CAP_SYS_ADMIN in a container.
  const auto probe = test::run_command("unshare --mount --propagation private -- sh -c "
                                       "'mount -t tmpfs probe /mnt && umount /mnt' 2>&1");
  if (probe.exit_code != 0) GTEST_SKIP() << "no private mounts here (unshare --mount): " << probe.output;
  const fs::path dir = test::scratch_dir("unseen-test", "node-local");
  const fs::path run_dir = dir / "run", script = dir / "private_timeline.sh";
  std::ofstream(script) << private_timeline_script;
  fs::permissions(script, fs::perms::owner_all);
  fs::create_directories(run_dir / "timeline");  // the mount point the other ranks cover
  const auto result = test::run_command(
      std::string(SLUICE_MPIEXEC) + " --oversubscribe --bind-to none -np 3 " + script.string() + " " +
      (run_dir / "timeline").string() + " " + SLUICE_BINARY + " train --cache " + cache_.string() + " --run-dir " +
      run_dir.string() + " --steps 12 --set train.n_buckets=2 --set train.batch_size=4 --set optim.warmup_steps=10"
      " --set train.validation_every=0 --set train.checkpoint_every=0 --set runtime.status_every_s=0");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // Rank 0 saw neither file, said so, and took both over MPI.
  EXPECT_NE(result.output.find("rank 0 does not see the timelines of ranks 1 2"), std::string::npos) << result.output;
  for (int rank : {0, 1, 2}) {
    const fs::path file = run_dir / "timeline" / ("rank-" + std::to_string(rank) + ".json");
    ASSERT_TRUE(fs::exists(file)) << file;
    const json timeline = read_json(file);
    EXPECT_EQ(timeline["rank"], rank);
    EXPECT_EQ(timeline["status"], "finished");
    EXPECT_FALSE(timeline["spans"].empty()) << file;
  }
  // The report rank 0 wrote at the end of the run covers all three ranks.
  const json report = read_json(run_dir / "report.json");
  EXPECT_EQ(report["world_size"], 3);
  EXPECT_TRUE(report["hang"]["missing_ranks"].empty()) << report["hang"];
  EXPECT_FALSE(report["hang"]["any"].get<bool>()) << report["hang"];
  std::set<int> model_ranks;
  for (const auto& m : report["model_ranks"]) {
    model_ranks.insert(m["rank"].get<int>());
    EXPECT_EQ(m["steps"], 12) << m["name"];
  }
  EXPECT_EQ(model_ranks, (std::set<int>{1, 2}));
  ASSERT_EQ(report["data_ranks"].size(), 1u);
  EXPECT_EQ(report["data_ranks"][0]["rank"], 0);
  // Every rank's fate and channel counts, from the three files: each model rank received the 12
  // batches rank 0 sent it.
  ASSERT_EQ(report["hang"]["ranks"].size(), 3u);
  for (const auto& fate : report["hang"]["ranks"]) {
    EXPECT_EQ(fate["status"], "finished") << fate;
    for (const auto& channel : fate["channels"]) EXPECT_EQ(channel["batches"], 12) << fate;
  }
  EXPECT_EQ(report["hang"]["ranks"][0]["channels"].size(), 2u);
  EXPECT_TRUE(report["hang"]["channel_mismatches"].empty()) << report["hang"];
}

}  // namespace
}  // namespace sluice
