#pragma once
// Step 5 of `sluice prep` (runtime/prep/prep_job.h), on rank 0 once every rank succeeded: the
// cache's metadata. Writes rejects.jsonl, index.h5, sluice-prep.yaml and prep-report.json, and
// last, when the rejects are within prep.max_reject_fraction, manifest.json (only the manifest
// makes a cache); prints the per-rank summary table. Local: no message to another rank.
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "runtime/prep/prep_plan.h"
#include "runtime/prep/prep_settings.h"
#include "runtime/prep/rank_result.h"

namespace sluice::runtime {

// Returns prep_ok, or prep_too_many_rejects (no manifest written, the error logged). Shard files
// beyond the plan's count (an older layout) are removed. `config` is copied into the cache as
// sluice-prep.yaml; `results`: every rank's (index = rank). Throws what the cache and file layers
// throw (CacheError, an environment error for a full disk).
int finalize_cache(const PrepSettings& settings, const config::Config& config, const PrepPlan& plan,
                   const nlohmann::json& vocabulary_json, const std::vector<PrepRankResult>& results, double wall_s);

}  // namespace sluice::runtime
