#pragma once
// Typed views of the train job's sections of the one schema (runtime/settings.h).
#include <string>
#include <vector>

#include "common/config.h"
#include "runtime/train/batch_plan.h"
#include "runtime/train/role_plan.h"

namespace sluice::runtime {

// train.*: the batch plan settings (bucket edges, batch size or frame budget, seed, padding).
BatchPlanConfig batch_plan_config(const config::Config& config);
// roles.* and model.device: the role-plan request of `sluice train` for these hosts and the GPUs
// visible on each node (used by train and doctor, so both judge a plan the same way).
RolePlanRequest role_plan_request(const config::Config& config, std::vector<std::string> hosts, int gpus_per_node);

}  // namespace sluice::runtime
