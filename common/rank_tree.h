#pragma once
// The tree sluice sends per-interval messages up instead of to rank 0 (the live status of
// `sluice train`, runtime/train/status_board.h) and the ranks whose heartbeat a rank watches at
// the end of a run (common/heartbeat.h, LIVENESS): fan-out 8 by octal digits. A rank's parent
// clears its lowest non-zero octal digit (rank 013 -> 010 -> 000, octal), so the ranks of a node
// of 8 consecutive ranks share their first level, a rank has at most 7 children per digit level
// below its lowest non-zero digit, rank 0 has 7 x log8(ranks) (28 at 4,096 ranks), and a leaf is
// at most log8(ranks) hops from rank 0 (4 at 4,096). Pure arithmetic, the same on every rank.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace sluice {

struct RankTree {
  static constexpr int fan_out = 8;

  // -1 for rank 0.
  static int parent(int rank) {
    if (rank <= 0) return -1;
    int64_t place = 1;
    while ((rank / place) % fan_out == 0) place *= fan_out;
    return static_cast<int>(rank - (rank / place) % fan_out * place);
  }

  static std::vector<int> children(int rank, int size) {
    std::vector<int> out;
    // Levels below the rank's lowest non-zero digit (every level for rank 0).
    for (int64_t place = 1; place < size; place *= fan_out) {
      if (rank != 0 && (rank / place) % fan_out != 0) break;
      for (int digit = 1; digit < fan_out; ++digit) {
        const int64_t child = rank + digit * place;
        if (child < size) out.push_back(static_cast<int>(child));
      }
    }
    return out;
  }

  // The rank and every rank below it.
  static int subtree_size(int rank, int size) {
    if (rank == 0) return size;
    int64_t place = 1;
    while ((rank / place) % fan_out == 0) place *= fan_out;
    return static_cast<int>(std::min<int64_t>(place, size - rank));
  }
};

}  // namespace sluice
