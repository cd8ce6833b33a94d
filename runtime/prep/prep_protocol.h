#pragma once
// The message tags of the prep protocol (the protocol itself: runtime/prep/prep_job.h). Every
// exchange of the job is on the world communicator; the tags keep them apart.

namespace sluice::runtime {

enum PrepTag : int {
  tag_probe = 101,    // step 2: a rank's audio header probes, to rank 0
  tag_plan,           // step 3: rank 0's plan (or refusal), to every rank
  tag_heartbeat,      // step 4: a subtree's beat, to the parent (common/heartbeat_tree.h)
  tag_ping,           // step 4: a parent's ping, to its children
  tag_result,         // step 5: a rank's result (PrepRankResult), to rank 0
  tag_outcome,        // step 5: the job's exit code, from rank 0
  tag_timeline,       // the timeline gather at the end (runtime/rank_timing.h)
  tag_shard_request,  // a rank about to run out of shards asks rank 0 for more (payload: "")
  tag_shard_grant,    // rank 0's answer: a JSON array of shard numbers, [] when none are left
};

}  // namespace sluice::runtime
