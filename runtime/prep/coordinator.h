#pragma once
// Step 4-5 of `sluice prep` (the protocol: runtime/prep/prep_job.h), after the plan: rank 0
// coordinates (hands out shards, takes the results, heads the heartbeat tree, finalizes the cache,
// broadcasts the outcome); every other rank follows (asks for shards, sends its result, beats
// until the outcome comes). Every wait across ranks ends within runtime.timeout_s of a rank's
// silence: a silent rank is named (rank and host) by its parent in the heartbeat tree
// (common/heartbeat_tree.h), a silent parent or coordinator by its children.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/config.h"
#include "common/mpi_session.h"
#include "runtime/prep/prep_plan.h"
#include "runtime/prep/prep_settings.h"
#include "runtime/prep/shard_builder.h"

namespace sluice::runtime {

// Why a prep job failed, as rank 0 knows it: the first failing rank's error (a bug on any rank
// before a full disk on another: the bug needs a person), or finalize's.
struct PrepFailure {
  bool environment = false;  // the machine refused: exit prep_environment
  std::string error;
  int rank = -1;
  std::string host;

  // {stop_reason, error, error_rank, error_host}: the timeline summary's, so that the report
  // names the error instead of a hang.
  nlohmann::json timeline_summary() const;
};

// Rank 0 from the plan to the end: returns the job's exit code, which every rank gets too.
// `failure` is set when that is prep_failed or prep_environment. `config` is only copied into
// the cache (runtime/prep/finalize.h). Throws TransportError naming a rank silent for
// runtime.timeout_s.
int coordinate(const MpiSession& session, const PrepSettings& settings, const config::Config& config,
               ShardBuilder& builder, const PrepPlan& plan, const nlohmann::json& vocabulary_json,
               Clock::time_point started, std::optional<PrepFailure>& failure);

// Every rank but 0 from the plan to the end: returns the job's exit code from rank 0. Throws
// TransportError naming rank 0 or this rank's parent when either is silent for runtime.timeout_s.
int follow(const MpiSession& session, const PrepSettings& settings, ShardBuilder& builder);

}  // namespace sluice::runtime
