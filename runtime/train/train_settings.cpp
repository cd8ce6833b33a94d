#include "runtime/train/train_settings.h"

#include <cstdlib>

#include "common/error.h"
#include "runtime/settings.h"

namespace sluice::runtime {
namespace {

// roles.* and model.device, without hosts or GPUs.
RolePlanRequest role_settings(const config::Config& config) {
  RolePlanRequest request;
  request.model_needs_gpu = config.string("model.device") == "cuda";
  request.data_per_node = static_cast<int>(config.integer("roles.data_per_node"));
  request.layout = split_list(config.string("roles.layout"));
  request.transport = config.string("roles.transport");
  request.model_gpu_memory_fraction = config.number("roles.model_gpu_memory_fraction");
  request.data_gpu_memory_fraction = config.number("roles.data_gpu_memory_fraction");
  return request;
}

RolePlanRequest with_topology(RolePlanRequest request, std::vector<std::string> hosts, int gpus_per_node) {
  request.hosts = std::move(hosts);
  request.gpus_per_node = request.model_needs_gpu ? gpus_per_node : 0;  // a CPU run plans without GPUs
  return request;
}

model::OptimizerConfig optimizer_config(const config::Config& config) {
  model::OptimizerConfig optimizer;
  optimizer.lr = config.number("optim.lr");
  optimizer.warmup_steps = config.integer("optim.warmup_steps");
  optimizer.weight_decay = config.number("optim.weight_decay");
  optimizer.betas = {config.number("optim.beta1"), config.number("optim.beta2")};
  optimizer.grad_clip_norm = config.number("optim.grad_clip");
  optimizer.accumulation_steps = static_cast<int>(config.integer("optim.accumulation"));
  return optimizer;
}

model::FeatureTransformSettings masking_settings(const config::Config& config) {
  model::FeatureTransformSettings features;
  features.masking.time_masks = static_cast<int>(config.integer("train.time_masks"));
  features.masking.max_time_frames = static_cast<int>(config.integer("train.time_mask_frames"));
  features.masking.freq_masks = static_cast<int>(config.integer("train.freq_masks"));
  features.masking.max_freq_bins = static_cast<int>(config.integer("train.freq_mask_bins"));
  return features;
}

}  // namespace

TrainSettings TrainSettings::read(const config::Config& config) {
  TrainSettings settings;
  settings.run_dir = config.string("train.run_dir");
  settings.cache_dir = config.string("cache.dir");
  settings.timeout_s = config.number("runtime.timeout_s");
  settings.status_every_s = config.number("runtime.status_every_s");
  settings.progress.measured = config.string("runtime.timeouts") == "measured";
  settings.progress.factor = config.number("runtime.timeout_factor");
  settings.progress.min_s = config.number("runtime.timeout_min_s");
  settings.progress.startup_s = config.number("runtime.startup_timeout_s");
  settings.progress.warmup_steps = config.integer("runtime.timeout_warmup_steps");
  settings.roles = role_settings(config);
  settings.plan = batch_plan_config(config);
  settings.mixture = parse_mixture(config.string("train.mixture"));
  settings.validation_fraction = config.number("train.validation_fraction");
  settings.validation_seed = static_cast<uint64_t>(config.integer("train.validation_seed"));
  settings.steps = config.integer("train.steps");
  settings.epochs = config.integer("train.epochs");
  settings.log_every = config.integer("train.log_every");
  settings.validation_every = config.integer("train.validation_every");
  settings.checkpoint_every = config.integer("train.checkpoint_every");
  settings.credits = static_cast<int>(config.integer("train.credits"));
  settings.reader_threads = static_cast<int>(config.integer("train.reader_threads"));
  settings.read_ahead = static_cast<int>(config.integer("train.read_ahead"));
  settings.replay_from_memory = config.boolean("train.replay_from_memory");
  settings.log_samples = config.boolean("debug.log_samples");
  settings.model.kind = config.string("model.kind");
  settings.model.size = config.string("model.size");
  settings.model.torchscript_path = config.string("model.torchscript_path");
  settings.model.dropout = config.number("model.dropout");
  settings.bf16 = config.boolean("model.bf16");
  settings.optimizer = optimizer_config(config);
  settings.seed = static_cast<uint64_t>(config.integer("train.seed"));
  settings.normalize_mels = config.boolean("train.normalize_mels");
  settings.features = masking_settings(config);
  settings.features.seed = settings.seed;
  return settings;
}

RolePlanRequest TrainSettings::role_plan_request(std::vector<std::string> hosts, int gpus_per_node) const {
  return with_topology(roles, std::move(hosts), gpus_per_node);
}

model::FeatureTransformSettings feature_settings(const TrainSettings& settings, const cache::CacheReader& reader) {
  model::FeatureTransformSettings features = settings.features;
  if (settings.normalize_mels) {
    const cache::MelStatistics* statistics = reader.mel_statistics();
    if (statistics == nullptr) {
      throw ConfigError("train.normalize_mels: the cache in " + settings.cache_dir +
                        " has no mel statistics (an older sluice prep wrote it); run sluice prep again with the "
                        "same --out (it rewrites the shards without them), or set train.normalize_mels: false");
    }
    features.mean = statistics->mean;
    features.stddev = statistics->stddev;
  }
  return features;
}

bool operator==(const MixtureEntry& a, const MixtureEntry& b) { return a.dir == b.dir && a.weight == b.weight; }

std::vector<MixtureEntry> parse_mixture(const std::string& text) {
  std::vector<MixtureEntry> mixture;
  for (const std::string& item : split_list(text)) {
    MixtureEntry entry{item, 1.0};
    const size_t colon = item.rfind(':');
    if (colon != std::string::npos) {
      entry.dir = item.substr(0, colon);
      const std::string weight = item.substr(colon + 1);
      char* end = nullptr;
      entry.weight = std::strtod(weight.c_str(), &end);
      if (weight.empty() || end != weight.c_str() + weight.size() || !(entry.weight > 0.0 && entry.weight <= 1000.0)) {
        throw ConfigError("train.mixture: '" + item + "' has weight '" + weight +
                          "'; a weight is a number above 0 and at most 1000, e.g. \"data/cache-a:1, data/cache-b:0.5\"");
      }
    }
    if (entry.dir.empty()) throw ConfigError("train.mixture: '" + item + "' names no cache directory");
    mixture.push_back(entry);
  }
  return mixture;
}

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
  // The weights; where each cache's indices begin is known once they are open (train_job.cpp).
  for (const MixtureEntry& entry : parse_mixture(config.string("train.mixture"))) plan.mixture.push_back({0, entry.weight});
  plan.mixture_temperature = config.number("train.mixture_temperature");
  plan.mixture_unit = parse_mixture_unit(config.string("train.mixture_temperature_over"));
  // One cache tempered over its languages or speakers is a mixture of one corpus (batch_plan.h).
  if (plan.mixture.empty() && plan.mixture_unit != MixtureUnit::corpus) plan.mixture.push_back({0, 1.0});
  return plan;
}

RolePlanRequest role_plan_request(const config::Config& config, std::vector<std::string> hosts, int gpus_per_node) {
  return with_topology(role_settings(config), std::move(hosts), gpus_per_node);
}

}  // namespace sluice::runtime
