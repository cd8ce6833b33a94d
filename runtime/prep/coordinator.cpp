#include "runtime/prep/coordinator.h"

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/heartbeat_tree.h"
#include "common/log.h"
#include "runtime/prep/finalize.h"
#include "runtime/prep/prep_job.h"
#include "runtime/prep/prep_protocol.h"
#include "runtime/prep/progress_line.h"
#include "runtime/prep/rank_result.h"

namespace sluice::runtime {
namespace {

using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

// When a rank asks for more shards: when its workers have begun every shard it holds, or when the
// one not yet begun is short work (under lead_seconds at its own rate so far, as with many workers
// a rank). The grant comes within two 20 ms polls (rank 0's and the asking rank's), and the shard
// the workers are on is the lead: with one worker a 256-clip shard takes 0.3-0.6 s. Asking already
// with one whole shard not yet begun (the rule before) made a rank hold a shard more than it
// needed, so that at the end one rank still had a whole shard to write while the other had none:
// 0.25 s of a 6 s two-rank job in which a core idled.
constexpr double lead_seconds = 0.1;
bool wants_shards(const ShardBuilder& builder) {
  const int64_t ahead = builder.shards_ahead();
  return ahead == 0 || (ahead == 1 && builder.seconds_ahead() < lead_seconds);
}

// Gives the builder the shards rank 0 handed out; none means none will come. Returns whether the
// builder is now closed.
bool hand_to(ShardBuilder& builder, const std::vector<int64_t>& shards) {
  for (int64_t shard : shards) builder.add(shard);
  if (shards.empty()) builder.close();
  return shards.empty();
}

// A beat's progress in the heartbeat tree: the builder's counters, summed up the tree.
json progress_payload(const BuildProgress& progress) {
  return {{"items", progress.items.load()},
          {"audio_ms", progress.audio_ms.load()},
          {"rejects", progress.rejects.load()},
          {"total_items", progress.total_items.load()},
          {"total_audio_ms", progress.total_audio_ms.load()}};
}

// The prep job's heartbeat tree (common/heartbeat_tree.h); its beats carry progress_payload().
HeartbeatTree progress_tree(const MpiSession& session, double interval_s, double timeout_s) {
  return HeartbeatTree(session, interval_s, timeout_s, {tag_heartbeat, tag_ping},
                       {"prep", "finished shards are kept for a rerun"});
}

// Rank 0 (not rank 0's own words): the first silent rank the tree names, as the job's error.
[[noreturn]] void throw_silent(const MpiSession& session, const json& silent, double timeout_s) {
  const int rank = silent["rank"].get<int>();
  const int noticed_by = silent["noticed_by"].get<int>();
  const json& last = silent["last"];
  throw TransportError(session.describe(rank) + " (prep writer) has been silent for " +
                       std::to_string(static_cast<int>(silent["seconds"].get<double>())) + " s (runtime.timeout_s = " +
                       std::to_string(timeout_s) + ")" +
                       (noticed_by == 0 ? "" : ", as its parent rank " + std::to_string(noticed_by) + " reports") +
                       "; last progress: " + (last.is_null() ? std::string("none") : last.dump()) +
                       ". Check that rank's log; finished shards are kept for a rerun");
}

// Rank 0 between the plan and the results: hands out the shards (its own builder's too), takes
// the results, and at the top of the heartbeat tree prints the job's progress and fails it naming
// a silent rank. Returns every rank's result (index = rank).
std::vector<PrepRankResult> supervise(const MpiSession& session, ShardBuilder& builder, const PrepPlan& plan,
                                      double interval_s, double timeout_s) {
  const int size = session.size();
  std::vector<std::optional<PrepRankResult>> results(static_cast<size_t>(size));
  HeartbeatTree tree = progress_tree(session, interval_s, timeout_s);
  ProgressLine line("prep");
  ShardDispenser dispenser(plan, size);
  // The totals are the plan's: the beats' count only the shards handed out so far.
  const double total_audio_seconds = std::accumulate(plan.item_seconds.begin(), plan.item_seconds.end(), 0.0);
  bool own_closed = false;
  int pending = size;
  const auto take_result = [&](int rank, PrepRankResult result) {
    if (!result.ok) dispenser.stop();
    results[static_cast<size_t>(rank)] = std::move(result);
    --pending;
  };
  while (pending > 0) {
    std::string payload;
    int sender = -1;
    while (try_receive_string(session, tag_result, payload, sender)) take_result(sender, PrepRankResult::from_json(json::parse(payload)));
    while (try_receive_string(session, tag_shard_request, payload, sender)) {
      send_string(session, sender, tag_shard_grant, json(dispenser.next()).dump(), deadline_after(timeout_s),
                  "shards for " + session.describe(sender));
    }
    if (!own_closed && wants_shards(builder)) own_closed = hand_to(builder, dispenser.next());
    if (!results[0] && builder.done()) take_result(0, PrepRankResult::from_build(builder.finish(), 0, session.host()));
    if (tree.poll(progress_payload(builder.progress()))) {
      const json beat = tree.subtree_beat(progress_payload(builder.progress()));
      if (!beat["silent"].empty()) {
        line.finish();
        throw_silent(session, beat["silent"][0], timeout_s);
      }
      ProgressCounts counts;
      counts.items = beat["items"].get<int64_t>();
      counts.total_items = plan.item_count;
      counts.audio_seconds = beat["audio_ms"].get<double>() / 1000.0;
      counts.total_audio_seconds = total_audio_seconds;
      counts.rejects = beat["rejects"].get<int64_t>();
      line.update(counts);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  line.finish();
  std::vector<PrepRankResult> taken;
  for (auto& result : results) taken.push_back(std::move(result.value()));
  return taken;
}

// Ranks other than 0: ask rank 0 for shards as the builder runs low, send the result when the
// builder is done, and beat in the heartbeat tree until the outcome comes.
}  // namespace

int follow(const MpiSession& session, const PrepSettings& settings, ShardBuilder& builder) {
  const double timeout_s = settings.timeout_s;
  HeartbeatTree tree = progress_tree(session, settings.progress_interval_s, timeout_s);
  bool sent = false, closed = false;
  bool asked = false;  // a request is in flight, sent at asked_at
  Clock::time_point asked_at;
  while (true) {
    std::string payload;
    int sender = -1;
    if (sent && try_receive_string(session, tag_outcome, payload, sender)) return std::stoi(payload);
    tree.poll(progress_payload(builder.progress()));
    if (!closed && !asked && !builder.done() && wants_shards(builder)) {
      send_string(session, 0, tag_shard_request, "", deadline_after(timeout_s), "a request for shards");
      asked = true;
      asked_at = Clock::now();
    }
    if (asked && try_receive_string(session, tag_shard_grant, payload, sender)) {
      closed = hand_to(builder, json::parse(payload).get<std::vector<int64_t>>());
      asked = false;
    } else if (asked && !builder.done() && seconds_since(asked_at) > timeout_s) {
      throw TransportError(session.describe(0) + " (prep coordinator) has not answered a request for shards in " +
                           std::to_string(static_cast<int>(seconds_since(asked_at))) +
                           " s (runtime.timeout_s); finished shards are kept for a rerun");
    }
    if (!sent && builder.done()) {
      const BuildResult result = builder.finish();
      if (result.error) logger()->error("{}", error_text(result.error));
      send_string(session, 0, tag_result, PrepRankResult::from_build(result, session.rank(), session.host()).to_json().dump(),
                  deadline_after(timeout_s), "the prep result");
      sent = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

json PrepFailure::timeline_summary() const {
  return {{"stop_reason", environment ? "environment_error" : "failed"},
          {"error", error},
          {"error_rank", rank},
          {"error_host", host}};
}

int coordinate(const MpiSession& session, const PrepSettings& settings, const config::Config& config,
               ShardBuilder& builder, const PrepPlan& plan, const json& vocabulary_json, Clock::time_point started,
               std::optional<PrepFailure>& failure) {
  const auto results = supervise(session, builder, plan, settings.progress_interval_s, settings.timeout_s);
  int outcome = prep_ok;
  for (const auto& r : results) {
    if (!r.ok) {
      logger()->error("rank {} ({}) failed: {}", r.rank, r.host, r.error);
      // A full disk on one rank and a bug on another: the bug decides (it needs a person).
      if (outcome == prep_ok || (!r.environment_error && outcome == prep_environment)) {
        failure = PrepFailure{r.environment_error, r.error, r.rank, r.host};
      }
      if (outcome == prep_ok || !r.environment_error) outcome = r.environment_error ? prep_environment : prep_failed;
    }
  }
  if (outcome == prep_ok) {
    try {
      outcome = finalize_cache(settings, config, plan, vocabulary_json, results, seconds_since(started));
    } catch (const std::exception& error) {
      logger()->error("writing the cache's index and manifest failed: {}", error.what());
      const auto* ours = dynamic_cast<const Error*>(&error);
      outcome = ours != nullptr && ours->kind() == ErrorKind::environment ? prep_environment : prep_failed;
      failure = PrepFailure{outcome == prep_environment,
                            std::string("writing the cache's index and manifest failed: ") + error.what(),
                            session.rank(), session.host()};
    }
  }
  if (outcome == prep_failed || outcome == prep_environment) {
    logger()->info("no manifest was written; the finished shards are kept: rerun `sluice prep` with the same "
                   "settings to resume");
  }
  broadcast_string(session, std::to_string(outcome), tag_outcome, settings.timeout_s, "the prep outcome");
  return outcome;
}

}  // namespace sluice::runtime
