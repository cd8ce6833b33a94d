#pragma once
// Steps 2-3 of `sluice prep` (runtime/prep/prep_job.h): every rank probes its share of the audio
// headers and sends them to rank 0; rank 0 fingerprints the inputs, checks an existing cache,
// plans the shards (runtime/prep/prep_plan.h) and broadcasts the plan or its refusal. Both
// exchanges have the runtime.timeout_s deadline (common/mpi_session.h).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/mpi_session.h"
#include "dataset/corpus.h"
#include "runtime/prep/prep_plan.h"
#include "runtime/prep/prep_settings.h"

namespace sluice::runtime {

// The plan every rank agreed on, or, when rank 0 refused, nullopt and the exit code.
struct PlanAgreement {
  std::optional<PrepPlan> plan;
  int refusal_code = 0;
};

// Collective: every rank calls it after reading `listing`. `lock_refusal` (rank 0): why this
// job may not write the cache (another prep holds it), or "": a locked-out rank 0 skips its
// probes and refuses (exit prep_failed); a cache made from other inputs is refused (prep_refused)
// unless prep.overwrite. Rank 0 removes a killed run's temporary shard files before it answers.
// Rank 0 logs the refusal. Throws TransportError when a rank is not heard from in time.
PlanAgreement agree_on_plan(const MpiSession& session, const PrepSettings& settings,
                            const dataset::CorpusListing& listing, const nlohmann::json& vocabulary_json,
                            const std::string& lock_refusal);

}  // namespace sluice::runtime
