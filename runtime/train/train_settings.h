#pragma once
// The train job's settings, typed: read once from the config (runtime/settings.h holds the one
// schema, with every default and range) and passed down, so that no piece of the job reads a
// key by its name.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/cache_reader.h"
#include "common/config.h"
#include "model/feature_transform.h"
#include "model/model_config.h"
#include "runtime/train/batch_plan.h"
#include "runtime/train/role_plan.h"

namespace sluice::runtime {

// One cache of train.mixture.
struct MixtureEntry {
  std::string dir;
  double weight = 1.0;
};
bool operator==(const MixtureEntry& a, const MixtureEntry& b);

// train.mixture ("DIR:WEIGHT, DIR:WEIGHT, ..."; a weight left out is 1): empty when it is empty.
// A weight that is not a number above 0 is a ConfigError naming the entry.
std::vector<MixtureEntry> parse_mixture(const std::string& text);

// runtime.timeouts and the measured deadlines' settings (runtime/train/progress_watchdog.h).
struct ProgressTimeouts {
  bool measured = false;      // runtime.timeouts: measured (fixed: no watchdog)
  double factor = 5;          // runtime.timeout_factor
  double min_s = 10;          // runtime.timeout_min_s
  double startup_s = 600;     // runtime.startup_timeout_s
  int64_t warmup_steps = 10;  // runtime.timeout_warmup_steps
};

struct TrainSettings {
  std::filesystem::path run_dir;  // train.run_dir
  std::string cache_dir;          // cache.dir
  std::vector<MixtureEntry> mixture;  // train.mixture (empty: cache.dir alone); plan.mixture's weights
  double timeout_s = 120;         // runtime.timeout_s: every wait across ranks
  double status_every_s = 10;     // runtime.status_every_s
  ProgressTimeouts progress;      // runtime.timeouts and its measured deadlines

  // roles.* and model.device (roles.model_needs_gpu); the hosts and GPUs of a run are added by
  // role_plan_request().
  RolePlanRequest roles;

  BatchPlanConfig plan;                // train.* plan settings (batch_plan_config)
  double validation_fraction = 0.05;   // train.validation_fraction
  uint64_t validation_seed = 17;       // train.validation_seed
  int64_t steps = 0;                   // train.steps (0: train.epochs)
  int64_t epochs = 1;                  // train.epochs
  int64_t log_every = 10;              // train.log_every
  int64_t validation_every = 100;      // train.validation_every (0: only at the end)
  int64_t checkpoint_every = 200;      // train.checkpoint_every (0: only at the end)

  // The feed.
  int credits = 3;                  // train.credits: slots of a model rank
  int reader_threads = 2;           // train.reader_threads
  int read_ahead = 4;               // train.read_ahead
  bool replay_from_memory = false;  // train.replay_from_memory
  bool log_samples = false;         // debug.log_samples: model ranks log every batch's samples

  // model.* (vocabulary, n_mels and device are the cache's and the rank's: see model_loop.cpp)
  // and optim.*; train.seed seeds the model and dropout.
  model::ModelConfig model;
  bool bf16 = true;  // model.bf16: autocast on a GPU
  model::OptimizerConfig optimizer;
  uint64_t seed = 1234;

  // train.normalize_mels and the masks (seeded by train.seed); the statistics come from the cache
  // (feature_settings()).
  bool normalize_mels = false;
  model::FeatureTransformSettings features;

  static TrainSettings read(const config::Config& config);

  // model.device: cuda.
  bool model_on_gpu() const { return roles.model_needs_gpu; }

  // The role-plan request for these hosts (index = rank) and the GPUs visible on each node.
  RolePlanRequest role_plan_request(std::vector<std::string> hosts, int gpus_per_node) const;
};

// The feature transform's settings with the cache's mel statistics when train.normalize_mels is
// on. Throws ConfigError when the cache has none.
model::FeatureTransformSettings feature_settings(const TrainSettings& settings, const cache::CacheReader& reader);

// How long a failing rank of `sluice train` lets the others name it and write their timelines
// before it aborts the job (launcher/launch.cpp, end_job; the progress watchdog): half of
// runtime.timeout_s, 1 to 3 s.
inline double abort_grace_s(double timeout_s) { return std::clamp(0.5 * timeout_s, 1.0, 3.0); }

// train.*: the batch plan settings (bucket edges, batch size or frame budget, seed, padding).
BatchPlanConfig batch_plan_config(const config::Config& config);
// roles.* and model.device: the role-plan request of `sluice train` for these hosts and the GPUs
// visible on each node (used by train and doctor, so both judge a plan the same way).
RolePlanRequest role_plan_request(const config::Config& config, std::vector<std::string> hosts, int gpus_per_node);

}  // namespace sluice::runtime
