#include "report/hang_facts.h"

#include <algorithm>
#include <set>

#include "report/report_text.h"
#include "report/run_analysis.h"

namespace sluice::report {
namespace {

using timing::RankTimeline;
using RankIndex = std::map<int, const RankTimeline*>;

// Every rank of the world into h.ranks, missing ones (also h.missing_ranks) included; counts in
// `waited_on` how many failed ranks waited for each rank.
void rank_fates(const RankIndex& by_rank, int world_size, const std::map<int, int64_t>& last_steps, HangFacts& h,
                std::map<int, int>& waited_on) {
  for (int r = 0; r < world_size; ++r) {
    RankFate fate;
    fate.rank = r;
    const auto it = by_rank.find(r);
    if (it == by_rank.end()) {
      fate.name = "rank " + std::to_string(r);
      fate.status = "missing";
      h.missing_ranks.push_back(r);
    } else {
      const RankTimeline& t = *it->second;
      fate.name = describe_rank(t);
      fate.status = t.status;
      fate.error = t.error;
      fate.waiting_for = t.waiting_for;
      fate.channels = t.channels;
      if (last_steps.count(r)) fate.last_step = last_steps.at(r);
      if (t.status == "failed" && t.waiting_for >= 0) ++waited_on[t.waiting_for];
    }
    h.ranks.push_back(fate);
  }
}

// Channel counts: what one side sent against what the other received, by rank.
std::vector<std::string> channel_mismatches(const RankIndex& by_rank) {
  std::vector<std::string> mismatches;
  for (const auto& [rank, t] : by_rank) {
    for (const auto& channel : t->channels) {
      if (channel.value("direction", "") != "send") continue;
      const int peer = channel.value("peer", -1);
      const int64_t sent = channel.value("batches", int64_t{0});
      const auto other = by_rank.find(peer);
      if (other == by_rank.end()) continue;
      for (const auto& receive : other->second->channels) {
        if (receive.value("direction", "") != "receive" || receive.value("peer", -1) != rank) continue;
        const int64_t received = receive.value("batches", int64_t{0});
        if (received != sent) {
          mismatches.push_back("rank " + std::to_string(rank) + " sent " + std::to_string(sent) + " batches to rank " +
                               std::to_string(peer) + ", which received " + std::to_string(received));
        }
      }
    }
  }
  return mismatches;
}

// The rank most waited for; a missing rank beats one that wrote its file; without waiters the
// first missing rank, else the first failed one. Then along the chain: a rank that was itself
// waiting points further.
int find_culprit(const HangFacts& h, const RankIndex& by_rank, const std::map<int, int>& waited_on) {
  int culprit = -1, most = 0;
  for (const auto& [rank, count] : waited_on) {
    const bool missing = !by_rank.count(rank);
    const bool culprit_missing = culprit >= 0 && !by_rank.count(culprit);
    if (culprit < 0 || (missing && !culprit_missing) || (missing == culprit_missing && count > most)) {
      culprit = rank;
      most = count;
    }
  }
  if (culprit < 0 && !h.missing_ranks.empty()) culprit = h.missing_ranks.front();
  if (culprit < 0) {
    const auto failed = std::find_if(h.ranks.begin(), h.ranks.end(), [](const RankFate& f) { return f.status == "failed"; });
    if (failed != h.ranks.end()) culprit = failed->rank;
  }
  std::set<int> seen;
  while (culprit >= 0 && !seen.count(culprit) && by_rank.count(culprit)) {
    seen.insert(culprit);
    const RankTimeline& t = *by_rank.at(culprit);
    if (t.status != "failed" || t.waiting_for < 0 || t.waiting_for == culprit) break;
    culprit = t.waiting_for;
  }
  return culprit;
}

// "rank 2 wrote no timeline: ...; ranks waiting for it: 1, 3", or the culprit's status and error.
std::string culprit_reason(const HangFacts& h) {
  const auto& fate = h.ranks.at(static_cast<size_t>(h.culprit));
  std::string reason =
      fate.status == "missing"
          ? "rank " + std::to_string(h.culprit) +
                " wrote no timeline: it died, was killed or never reached the end of the run"
          : fate.name + " (status " + fate.status + ", last step " + std::to_string(fate.last_step) +
                (fate.error.empty() ? "" : ", error: " + fate.error) + ")";
  std::vector<int> waiters;
  for (const auto& f : h.ranks) {
    if (f.status == "failed" && f.waiting_for == h.culprit) waiters.push_back(f.rank);
  }
  if (!waiters.empty()) reason += "; ranks waiting for it: " + rank_list(waiters);
  return reason;
}

}  // namespace

HangFacts hang_facts(const std::vector<RankTimeline>& timelines, int world_size,
                     const std::map<int, int64_t>& last_steps) {
  HangFacts h;
  RankIndex by_rank;
  for (const auto& t : timelines) by_rank[t.rank] = &t;
  std::map<int, int> waited_on;  // rank -> how many ranks waited for it
  rank_fates(by_rank, world_size, last_steps, h, waited_on);
  const bool failed = std::any_of(h.ranks.begin(), h.ranks.end(), [](const RankFate& f) { return f.status == "failed"; });
  h.any = failed || !h.missing_ranks.empty();
  h.channel_mismatches = channel_mismatches(by_rank);
  if (!h.any) return h;
  h.culprit = find_culprit(h, by_rank, waited_on);
  if (h.culprit >= 0) h.culprit_reason = culprit_reason(h);
  return h;
}

int64_t last_step_of(const RankTimeline& timeline) {
  int64_t last = -1;
  for (const auto& s : timeline.spans) last = std::max(last, s.step);
  return last;
}

}  // namespace sluice::report
