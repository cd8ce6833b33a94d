#include "runtime/train/train_settings.h"

#include "common/error.h"
#include "runtime/settings.h"

namespace sluice::runtime {

BatchPlanConfig batch_plan_config(const config::Config& config) {
  BatchPlanConfig plan;
  for (const auto& edge : split_list(config.string("train.bucket_edges"))) {
    try {
      plan.bucket_edges.push_back(std::stoi(edge));
    } catch (const std::exception&) {
      throw ConfigError("train.bucket_edges: '" + edge + "' is not a whole number of frames");
    }
  }
  plan.n_buckets = static_cast<int>(config.integer("train.n_buckets"));
  plan.batch_size = static_cast<int>(config.integer("train.batch_size"));
  plan.frame_budget = config.integer("train.frame_budget");
  plan.seed = static_cast<uint64_t>(config.integer("train.seed"));
  plan.pad_multiple = static_cast<int>(config.integer("train.pad_multiple"));
  return plan;
}

RolePlanRequest role_plan_request(const config::Config& config, std::vector<std::string> hosts, int gpus_per_node) {
  RolePlanRequest request;
  request.hosts = std::move(hosts);
  request.model_needs_gpu = config.string("model.device") == "cuda";
  request.gpus_per_node = request.model_needs_gpu ? gpus_per_node : 0;  // a CPU run plans without GPUs
  request.data_per_node = static_cast<int>(config.integer("roles.data_per_node"));
  request.layout = split_list(config.string("roles.layout"));
  request.transport = config.string("roles.transport");
  request.model_gpu_memory_fraction = config.number("roles.model_gpu_memory_fraction");
  request.data_gpu_memory_fraction = config.number("roles.data_gpu_memory_fraction");
  return request;
}

}  // namespace sluice::runtime
