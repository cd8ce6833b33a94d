#pragma once
// What a failed or incomplete run left, for the train and the prep report alike: who failed, who
// waited for whom, who never wrote a file, and which channel counts disagree. Read from the
// ranks' status, error, waiting_for and channels (timing/timeline_file.h) and nothing else, so
// both analyses compute it once from the timelines they already hold.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/timeline_file.h"

namespace sluice::report {

// What a failed or incomplete run left: who failed, who waited for whom, who never wrote a file.
struct RankFate {
  int rank = 0;
  std::string name;
  std::string status;  // finished | stopped | failed | missing
  std::string error;
  int waiting_for = -1;
  int64_t last_step = -1;  // the largest step of any span
  nlohmann::json channels = nlohmann::json::array();
};

struct HangFacts {
  bool any = false;             // a failed rank or a missing file
  std::vector<int> missing_ranks;
  std::vector<RankFate> ranks;  // every rank of the world, missing ones included
  int culprit = -1;             // the rank that never arrived, -1 when unknown
  std::string culprit_reason;
  std::vector<std::string> channel_mismatches;  // "rank 0 sent 12 batches to rank 1, which received 11"
};

// `timelines`: the ranks that wrote a file, in any order (their spans may be dropped; of a rank
// given twice the last counts);
// `world_size`: every rank of the world, missing ones included; `last_steps`: per rank, the
// largest step of any of its spans (a rank not in it shows last step -1). The culprit is the rank
// most waited for (a missing one first), followed along its own waiting_for.
HangFacts hang_facts(const std::vector<timing::RankTimeline>& timelines, int world_size,
                     const std::map<int, int64_t>& last_steps);

// The largest step of any span of `timeline`, -1 when none.
int64_t last_step_of(const timing::RankTimeline& timeline);

}  // namespace sluice::report
