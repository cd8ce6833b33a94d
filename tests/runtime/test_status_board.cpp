// The live status tree (runtime/train/status_board.h, common/rank_tree.h): its shape for up to 4,096 ranks (one
// process), and under mpirun with 12 ranks, rank 0's summary: every reporting rank's numbers
// summed through two levels, and a rank that never posts named as late by its parent.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

#include "runtime/train/finish_line.h"
#include "runtime/train/role_plan.h"
#include "runtime/train/status_board.h"
#include "tests/support/mpi_gtest.h"

namespace sluice::runtime {
namespace {

const MpiSession* session = nullptr;

TEST(RankTree, EveryRankReachesRankZeroAndFanInStaysSmall) {
  for (int size : {1, 2, 7, 8, 9, 64, 65, 1000, 4096}) {
    std::vector<int> parent_count(static_cast<size_t>(size), 0);
    size_t most_children = 0;
    for (int rank = 0; rank < size; ++rank) {
      const std::vector<int> children = RankTree::children(rank, size);
      most_children = std::max(most_children, children.size());
      int below = 1;
      for (int child : children) {
        ASSERT_EQ(RankTree::parent(child), rank) << "size " << size;
        ++parent_count[static_cast<size_t>(child)];
        below += RankTree::subtree_size(child, size);
      }
      ASSERT_EQ(below, RankTree::subtree_size(rank, size)) << "rank " << rank << " size " << size;
      int hops = 0;
      for (int at = rank; at != 0; at = RankTree::parent(at)) ASSERT_LT(++hops, 8) << "rank " << rank;
    }
    EXPECT_EQ(std::count(parent_count.begin(), parent_count.end(), 1), size - 1) << "size " << size;
    EXPECT_EQ(parent_count[0], 0);
    if (size == 4096) {
      EXPECT_EQ(most_children, 28u);  // rank 0: 7 per octal digit, 4 digits
    }
  }
  EXPECT_EQ(RankTree::parent(013), 010);
  EXPECT_EQ(RankTree::parent(010), 0);
  EXPECT_EQ(RankTree::parent(0120), 0100);
  EXPECT_EQ(RankTree::subtree_size(010, 12), 4);  // ranks 8..11
}

TEST(StatusSummary, MergesSumsTheSlowestAndTheFirstLateRank) {
  StatusSummary a, b;
  RankStatus model;
  model.role = "model";
  model.step = 10;
  model.samples_per_s = 5;
  model.seconds_per_step = 0.2;
  a.add(3, model);
  model.step = 12;
  model.seconds_per_step = 0.5;
  b.add(9, model);
  b.add_late(17, 8);
  RankStatus data;
  data.role = "data";
  a.add(2, data);
  a.add(b);
  a.add_late(12, 1);
  EXPECT_EQ(a.reporting, 3);
  EXPECT_EQ(a.models, 2);
  EXPECT_EQ(a.step, 12);
  EXPECT_DOUBLE_EQ(a.samples_per_s, 10);
  EXPECT_EQ(a.slowest, 9);
  EXPECT_EQ(a.late, 9);
  EXPECT_EQ(a.first_late, 12);
}

// The heartbeat's peers in `sluice train` at 4,096 ranks (512 nodes of 8: 1 data + 7 model
// ranks): symmetric (a beat goes only where it is listened for), a handful per rank, every data
// rank watched by its model ranks and every model rank by its data rank and its ring neighbours.
TEST(HeartbeatPeers, SymmetricAndLogarithmicAt4096Ranks) {
  std::vector<std::string> hosts;
  for (int r = 0; r < 4096; ++r) hosts.push_back("node" + std::to_string(r / 8));
  const RolePlan roles = plan_roles(RolePlanRequest(hosts));
  std::vector<std::vector<int>> peers;
  size_t most = 0, total = 0;
  for (int r = 0; r < 4096; ++r) {
    peers.push_back(heartbeat_peers(roles, r, 4096));
    most = std::max(most, peers.back().size());
    total += peers.back().size();
  }
  for (int r = 0; r < 4096; ++r) {
    for (int p : peers[static_cast<size_t>(r)]) {
      const auto& back = peers[static_cast<size_t>(p)];
      ASSERT_TRUE(std::find(back.begin(), back.end(), r) != back.end()) << r << " watches " << p << " but not back";
    }
    const RankPlacement& me = roles.at(r);
    for (int fed : me.feeds) {
      ASSERT_TRUE(std::count(peers[static_cast<size_t>(r)].begin(), peers[static_cast<size_t>(r)].end(), fed));
    }
  }
  EXPECT_LE(most, 40u);  // rank 0: 28 tree children + its 7 model ranks (some the same)
  std::printf("heartbeat peers at 4096 ranks: at most %zu, %zu beats per interval in all (every rank to every "
              "other: %d)\n", most, total, 4096 * 4095);
  EXPECT_LT(total, size_t{4096} * 16);
}

// Every rank but `silent` posts as a model rank (samples/s = rank + 1) every 0.1 s for 3 s with
// a 0.2 s interval; rank 0's last summary holds them all, through rank 8 for ranks 8..11.
TEST(StatusBoardMpi, RankZeroSumsEveryReportingRankAndNamesTheSilentOne) {
  const int size = session->size();
  const int silent = size > 10 ? 10 : -1;
  {
    StatusBoard board(*session, 0.2);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < end) {
      if (session->rank() != silent) {
        RankStatus mine;
        mine.role = "model";
        mine.step = 100 + session->rank();
        mine.end_step = 1000;
        mine.samples_per_s = session->rank() + 1;
        mine.seconds_per_step = session->rank() == 5 ? 9.0 : 0.1;
        board.post(mine);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (session->rank() == 0) {
      const StatusSummary& s = board.last_summary();
      double expected = 0;
      for (int r = 0; r < size; ++r) expected += r == silent ? 0 : r + 1;
      EXPECT_EQ(s.reporting, silent >= 0 ? size - 1 : size);
      EXPECT_DOUBLE_EQ(s.samples_per_s, expected);
      EXPECT_EQ(s.step, 100 + size - 1 - (silent == size - 1 ? 1 : 0));
      EXPECT_EQ(s.slowest, size > 5 ? 5 : s.slowest);
      EXPECT_EQ(s.late, silent >= 0 ? 1 : 0);
      EXPECT_EQ(s.first_late, silent);
      const std::string line = StatusBoard::render(s, *session);
      std::printf("%s\n", line.c_str());
      if (silent >= 0) {
        EXPECT_NE(line.find("first rank 10"), std::string::npos) << line;
      }
    }
    MPI_Barrier(session->world());  // nobody's board goes while another still sends to it
  }
}

}  // namespace
}  // namespace sluice::runtime

int main(int argc, char** argv) {
  return sluice::test::mpi_test_main(argc, argv, [](sluice::MpiSession* s) { sluice::runtime::session = s; });
}
