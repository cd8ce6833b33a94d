#include "runtime/train/train_job.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory_resource>
#include <thread>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "cache/cache_reader.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/host.h"
#include "common/slurm_env.h"
#include "common/stop_signal.h"
#include "common/log.h"
#include "model/device_facts.h"
#include "model/feature_transform.h"
#include "model/trainer.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/batch_feeder.h"
#include "runtime/train/mpi_gradient_reducer.h"
#include "runtime/train/finish_line.h"
#include "runtime/rank_timing.h"
#include "runtime/train/padding_summary.h"
#include "runtime/train/role_plan.h"
#include "runtime/settings.h"
#include "runtime/train/train_settings.h"
#include "runtime/train/status_board.h"
#include "timing/span_recorder.h"
#include "runtime/transport/cuda_ipc_channel.h"
#include "runtime/transport/device_memory.h"
#include "runtime/transport/inproc_channel.h"
#include "runtime/transport/mpi_channel.h"
#include "runtime/transport/nccl_channel.h"

namespace sluice::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }


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

model::BatchView view_of(const BatchPointers& batch) {
  model::BatchView view;
  view.tokens = batch.tokens;
  view.token_lens = batch.token_lens;
  view.mels = batch.mels;
  view.mel_lens = batch.mel_lens;
  view.batch_size = batch.header->batch_size;
  view.max_tokens = batch.header->max_tokens;
  view.max_frames = batch.header->max_frames;
  view.n_mels = batch.header->n_mels;
  return view;
}

// A batch that arrived in device memory: sizes from its host copy of the header, data on the GPU.
model::BatchView view_of(const DeviceBatch& batch) {
  model::BatchView view;  // not view_of(batch.device): its header is device memory
  view.tokens = batch.device.tokens;
  view.token_lens = batch.device.token_lens;
  view.mels = batch.device.mels;
  view.mel_lens = batch.device.mel_lens;
  view.batch_size = batch.host.header->batch_size;
  view.max_tokens = batch.host.header->max_tokens;
  view.max_frames = batch.host.header->max_frames;
  view.n_mels = batch.host.header->n_mels;
  view.on_device = true;
  return view;
}

// The mels of a collated host batch, for the feature transform; `mels` may point elsewhere (the
// same batch uploaded to a GPU).
model::MelBatchRef mel_batch_of(const BatchPointers& batch, float* mels) {
  model::MelBatchRef ref;
  ref.mels = mels;
  ref.mel_lens = batch.mel_lens;
  ref.sample_indices = batch.indices;
  ref.batch_size = batch.header->batch_size;
  ref.max_frames = batch.header->max_frames;
  ref.n_mels = batch.header->n_mels;
  return ref;
}

// train.normalize_mels and the SpecAugment settings, with the cache's statistics.
model::FeatureTransformSettings feature_settings(const config::Config& config, const cache::CacheReader& reader) {
  model::FeatureTransformSettings settings;
  settings.seed = static_cast<uint64_t>(config.integer("train.seed"));
  settings.masking.time_masks = static_cast<int>(config.integer("train.time_masks"));
  settings.masking.max_time_frames = static_cast<int>(config.integer("train.time_mask_frames"));
  settings.masking.freq_masks = static_cast<int>(config.integer("train.freq_masks"));
  settings.masking.max_freq_bins = static_cast<int>(config.integer("train.freq_mask_bins"));
  if (config.boolean("train.normalize_mels")) {
    const cache::MelStatistics* statistics = reader.mel_statistics();
    if (statistics == nullptr) {
      throw ConfigError("train.normalize_mels: the cache in " + config.string("cache.dir") +
                        " has no mel statistics (an older sluice prep wrote it); run sluice prep again with the "
                        "same --out (it rewrites the shards without them), or set train.normalize_mels: false");
    }
    settings.mean = statistics->mean;
    settings.stddev = statistics->stddev;
  }
  return settings;
}

bool gpu_transport(const std::string& transport) { return transport == "nccl" || transport == "cuda_ipc"; }

// Where checkpoints live and which one is the latest (a small JSON written atomically last).
class Checkpoints {
 public:
  explicit Checkpoints(fs::path run_dir) : dir_(std::move(run_dir) / "checkpoints") {}

  std::optional<json> latest() const {
    const fs::path path = dir_ / "latest.json";
    if (!fs::exists(path)) return std::nullopt;
    return json::parse(read_file(path));
  }

  void save(const model::Trainer& trainer, const json& position) {
    fs::create_directories(dir_);
    char name[64];
    std::snprintf(name, sizeof(name), "step-%010lld.pt", static_cast<long long>(position["global_step"].get<int64_t>()));
    trainer.save_checkpoint(dir_ / name, position);
    json latest = position;
    latest["file"] = name;
    write_file_atomically(dir_ / "latest.json", latest.dump(2) + "\n");
    // Keep the last three: enough to survive one bad write, bounded on disk.
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().extension() == ".pt") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (size_t i = 0; i + 3 < files.size(); ++i) fs::remove(files[i]);
  }

  fs::path file(const json& latest) const { return dir_ / latest["file"].get<std::string>(); }

 private:
  fs::path dir_;
};

// Everything a rank needs to know about the run, computed identically everywhere.
struct RunSetup {
  RolePlan roles;
  std::vector<int> model_ranks;  // model_ranks[i] trains plan column i
  std::unique_ptr<PlanSchedule> schedule;
  std::vector<PlanSample> validation;
  int64_t first_step = 0;
  int64_t end_step = 0;
  std::optional<json> resume_from;
};

// What a rank carries through the run besides the plan: its live status, its signs of life for
// the end of the run, the all-reduce baseline, the debug delay, and whom it was waiting for when a
// wait failed (for the timeline of a failed run).
struct RankContext {
  StatusBoard* status = nullptr;
  // Model ranks with peers: measures the all-reduce baseline for `floats` gradient values.
  std::function<double(size_t floats)> measure_allreduce;
  FinishLine* finish = nullptr;
  timing::InjectedDelay delay;
  int waiting_for = -1;
  // train.normalize_mels and the masks, with the cache's statistics (feature_settings()).
  model::FeatureTransformSettings features;
};

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

int model_index_of(const RunSetup& setup, int rank) {
  const auto it = std::find(setup.model_ranks.begin(), setup.model_ranks.end(), rank);
  return it == setup.model_ranks.end() ? -1 : static_cast<int>(it - setup.model_ranks.begin());
}

// This model rank's share of the validation split: mean loss over all model ranks.
double validation_loss(model::Trainer& trainer, cache::CacheReader& reader, const RunSetup& setup,
                       int model_index, const BatchPlanConfig& plan, model::GradientReducer* reducer,
                       const model::FeatureTransform& normalize) {
  double sums[2] = {0, 0};  // loss x samples, samples
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(model_index); i < setup.validation.size(); i += setup.model_ranks.size()) {
    mine.push_back(setup.validation[i].index);
  }
  const int per_batch = std::max(1, plan.batch_size);
  std::vector<cache::Sample> samples;
  BatchBytes bytes;
  for (size_t begin = 0; begin < mine.size(); begin += static_cast<size_t>(per_batch)) {
    const std::vector<int64_t> indices(mine.begin() + static_cast<ptrdiff_t>(begin),
                                       mine.begin() + static_cast<ptrdiff_t>(std::min(mine.size(), begin + per_batch)));
    reader.read_batch(indices, samples);
    BucketShape shape;
    shape.batch_size = static_cast<int32_t>(samples.size());
    for (const auto& sample : samples) {
      shape.max_frames = std::max(shape.max_frames, sample.n_frames);
      shape.max_tokens = std::max(shape.max_tokens, static_cast<int32_t>(sample.tokens.size()));
    }
    collate(samples, shape, reader.n_mels(), -1, -1, -1, bytes);
    const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
    // Normalised as training batches are, never masked.
    normalize.apply(mel_batch_of(batch, const_cast<float*>(batch.mels)), -1, false);
    const double loss = trainer.validation_loss(view_of(batch));
    sums[0] += loss * static_cast<double>(samples.size());
    sums[1] += static_cast<double>(samples.size());
  }
  if (reducer != nullptr) {
    float buffer[2] = {static_cast<float>(sums[0]), static_cast<float>(sums[1])};
    reducer->all_reduce_sum(buffer, 2);
    sums[0] = buffer[0];
    sums[1] = buffer[1];
  }
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
}

// The model side: receive, train, log, validate, checkpoint.
// Batches collated once per bucket and kept in memory: the baseline of the input-pipeline
// efficiency benchmark (train.replay_from_memory). Same shapes in the same order as the real
// feed, no cache reads, no transport. On a GPU model rank (`gpu` >= 0) the batches are uploaded
// once and stay in device memory, as a fed batch arrives there.
class ReplayBatches {
 public:
  ReplayBatches(cache::CacheReader& reader, const PlanSchedule& schedule, int model_index, int gpu)
      : schedule_(schedule), model_index_(model_index) {
    const auto plan = schedule.epoch(0);
    std::vector<cache::Sample> samples;
    for (int64_t step = 0; step < plan->steps(); ++step) {
      const PlannedBatch& batch = plan->batch(step, model_index);
      auto& bytes = by_bucket_[batch.bucket];
      if (!bytes.empty()) continue;
      reader.read_batch(batch.samples, samples);
      collate(samples, plan->buckets()[static_cast<size_t>(batch.bucket)], reader.n_mels(), 0, step, batch.bucket,
              bytes);
      if (gpu >= 0) {
        auto& uploaded = on_device_[batch.bucket];
        uploaded = std::make_unique<transport::DeviceUpload>(gpu, bytes.size());
        uploaded->upload(bytes.data(), bytes.size());
      }
    }
  }

  // The batch of `global` in device memory (after at(global)), as a fed batch arrives there; or
  // nullopt on the host.
  std::optional<DeviceBatch> on_device(const BatchPointers& host) const {
    const auto it = on_device_.find(host.header->bucket);
    if (it == on_device_.end()) return std::nullopt;
    DeviceBatch batch;
    batch.host = host;
    batch.device = BatchPointers::at(it->second->data(), *host.header);
    return batch;
  }

  BatchPointers at(int64_t global) {
    const PlanPosition position = schedule_.position(global);
    const int32_t bucket = schedule_.epoch(position.epoch)->batch(position.step, model_index_).bucket;
    auto& bytes = by_bucket_.at(bucket);
    // The header carries the position the loop checks; the payload is the bucket's batch.
    auto* header = reinterpret_cast<BatchHeader*>(bytes.data());
    header->epoch = position.epoch;
    header->step = position.step;
    return BatchPointers::of(bytes.data(), bytes.size());
  }

 private:
  const PlanSchedule& schedule_;
  int model_index_;
  std::map<int32_t, BatchBytes> by_bucket_;
  std::map<int32_t, std::unique_ptr<transport::DeviceUpload>> on_device_;
};

// `device_batches`: the channel hands out device memory (GPU transports).
json train_model(const MpiSession& session, const config::Config& config, const RunSetup& setup,
                 cache::CacheReader& reader, transport::ReceiveChannel* channel, int feeder_rank,
                 model::GradientReducer* reducer, RankContext& context, bool device_batches = false) {
  const int model_index = model_index_of(setup, session.rank());
  const bool speaker = model_index == 0;  // the first model rank logs and checkpoints
  const fs::path run_dir = config.string("train.run_dir");
  const BatchPlanConfig plan = batch_plan_config(config);
  const auto& manifest = reader.manifest();

  model::ModelConfig model;
  model.kind = config.string("model.kind");
  model.size = config.string("model.size");
  model.torchscript_path = config.string("model.torchscript_path");
  model.vocab_size = static_cast<int>(manifest["vocabulary"]["symbols"].size());
  model.n_mels = reader.n_mels();
  model.dropout = config.number("model.dropout");
  const int gpu = setup.roles.at(session.rank()).gpu;
  model.device = config.string("model.device") == "cuda" ? "cuda:" + std::to_string(std::max(0, gpu)) : "cpu";
  model.bf16_autocast = model.device != "cpu" && config.boolean("model.bf16");
  const double memory_fraction = config.number("roles.model_gpu_memory_fraction");
  if (model.device != "cpu" && memory_fraction > 0) {
    const int64_t cap = model::limit_gpu_memory(std::max(0, gpu), memory_fraction);
    logger()->info("rank {}: torch may take {:.1f} GiB ({:.0f}%) of GPU {} (roles.model_gpu_memory_fraction)",
                   session.rank(), double(cap) / double(1 << 30), 100 * memory_fraction, std::max(0, gpu));
  }
  // Validation batches are normalised on this rank's CPU, as the data ranks normalise training ones.
  model::FeatureTransformSettings normalization = context.features;
  normalization.masking = {};
  const model::FeatureTransform normalize(std::move(normalization), "cpu");
  model::Trainer trainer(model, optimizer_config(config), static_cast<uint64_t>(config.integer("train.seed")),
                         reducer);
  if (speaker) logger()->info("{}", trainer.describe());
  // The report compares the all-reduce bandwidth achieved in training with this one.
  const double allreduce_baseline =
      context.measure_allreduce ? context.measure_allreduce(static_cast<size_t>(trainer.parameter_count())) : 0.0;

  Checkpoints checkpoints(run_dir);
  if (setup.resume_from) {
    trainer.load_checkpoint(checkpoints.file(*setup.resume_from));
    if (speaker) logger()->info("resumed from {} at global step {}", (*setup.resume_from)["file"].get<std::string>(),
                                setup.first_step);
  }
  const auto position_json = [&](int64_t global) {
    const PlanPosition at = setup.schedule->position(global);
    return json{{"global_step", global}, {"epoch", at.epoch}, {"step", at.step},
                {"plan", setup.schedule->epoch(0)->fingerprint()}};
  };

  std::unique_ptr<ReplayBatches> replay;
  if (channel == nullptr) {
    replay = std::make_unique<ReplayBatches>(reader, *setup.schedule, model_index, model.device == "cpu" ? -1 : std::max(0, gpu));
  }
  // Steady state for throughput: after a warm-up of a fifth of the steps (at most 10).
  const int64_t warmup = std::min<int64_t>(10, (setup.end_step - setup.first_step) / 5);
  auto steady_started = Clock::now();
  int64_t steady_padded_frames = 0;

  const int64_t log_every = config.integer("train.log_every");
  const int64_t validation_every = config.integer("train.validation_every");
  const int64_t checkpoint_every = config.integer("train.checkpoint_every");
  const auto started = Clock::now();
  double wait_s = 0, compute_s = 0, window_loss = 0;
  int64_t window_steps = 0, samples = 0, frames = 0;
  auto& recorder = timing::SpanRecorder::global();
  // The live status covers the interval since the last post.
  struct Interval {
    Clock::time_point start = Clock::now();
    double wait_s = 0, busy_s = 0;
    int64_t steps = 0, samples = 0, frames = 0;
  } interval;
  json losses = json::array(), validations = json::array();
  int64_t stopped_at = -1;  // the step a stop signal ended the run at, if one did
  for (int64_t global = setup.first_step; global < setup.end_step;) {
    if (global == setup.first_step + warmup) {
      steady_started = Clock::now();
      steady_padded_frames = 0;
    }
    auto start = Clock::now();
    std::optional<transport::ReceivedBatch> received;
    const int64_t wait_start_ns = timing::now_ns();
    if (channel != nullptr) {
      context.waiting_for = feeder_rank;
      try {
        received = channel->receive();
      } catch (const TransportError& error) {
        // Say who this rank was waiting for in the run's terms: the data rank, its step.
        throw TransportError("model " + session.describe(session.rank()) + " waiting for global step " +
                             std::to_string(global) + " from its data " + session.describe(feeder_rank) +
                             ": " + error.what());
      }
      if (!received) {
        throw TransportError("the feed from " + session.describe(feeder_rank) + " ended at global step " +
                             std::to_string(global) + " of " + std::to_string(setup.end_step));
      }
    }
    context.waiting_for = -1;
    {
      timing::Span span;
      span.stage = timing::Stage::batch_wait;
      span.start_ns = wait_start_ns;
      span.end_ns = timing::now_ns();
      span.step = global;
      span.peer = feeder_rank;
      if (received) {
        span.sequence = static_cast<int64_t>(received->sequence);
        span.bytes = static_cast<int64_t>(received->bytes);
      }
      recorder.record(span);
    }
    wait_s += seconds_since(start);
    interval.wait_s += seconds_since(start);
    std::optional<DeviceBatch> on_device;
    if (received && device_batches) {
      on_device = DeviceBatch::of(received->data, received->bytes, &transport::copy_device_to_host);
    }
    const BatchPointers batch = replay      ? replay->at(global)
                                : on_device ? on_device->host
                                            : BatchPointers::of(received->data, received->bytes);
    if (replay) on_device = replay->on_device(batch);
    const PlanPosition expected = setup.schedule->position(global);
    if (batch.header->epoch != expected.epoch || batch.header->step != expected.step) {
      throw TransportError("received epoch " + std::to_string(batch.header->epoch) + " step " +
                           std::to_string(batch.header->step) + " from " + session.describe(feeder_rank) +
                           ", expected epoch " + std::to_string(expected.epoch) + " step " +
                           std::to_string(expected.step) + ": data and model ranks disagree on the plan");
    }
    start = Clock::now();
    const int64_t forward_start_ns = timing::now_ns();
    context.delay.apply(timing::Stage::forward, session.rank(), global);
    const int64_t step_start_ns = timing::now_ns();
    // On a GPU the step ends with the loss read back, after every kernel that reads the batch:
    // the slot is free to release when it returns.
    const model::StepResult result = trainer.train_step(on_device ? view_of(*on_device) : view_of(batch));
    context.delay.apply(timing::Stage::optimizer, session.rank(), global);
    {
      // The trainer times its phases; laid end to end from the step's start they are its spans.
      timing::Span span;
      span.step = global;
      int64_t at = forward_start_ns;
      const auto phase = [&](timing::Stage stage, int64_t end_ns) {
        span.stage = stage;
        span.start_ns = at;
        span.end_ns = std::max(at, end_ns);
        recorder.record(span);
        at = span.end_ns;
      };
      phase(timing::Stage::forward, step_start_ns + static_cast<int64_t>(result.forward_s * 1e9));
      phase(timing::Stage::backward, at + static_cast<int64_t>(result.backward_s * 1e9));
      phase(timing::Stage::allreduce_exposed, at + static_cast<int64_t>(result.allreduce_exposed_s * 1e9));
      phase(timing::Stage::optimizer, timing::now_ns());
    }
    compute_s += seconds_since(start);
    interval.busy_s += seconds_since(start);
    int64_t batch_frames = 0;
    for (int32_t i = 0; i < batch.header->batch_size; ++i) batch_frames += batch.mel_lens[i];
    frames += batch_frames;
    samples += batch.header->batch_size;
    ++interval.steps;
    interval.samples += batch.header->batch_size;
    interval.frames += batch_frames;
    steady_padded_frames += int64_t{batch.header->batch_size} * batch.header->max_frames;
    if (channel != nullptr) channel->release(*received);
    ++global;
    window_loss += result.loss;
    ++window_steps;
    losses.push_back(result.loss);

    // Preemption: every model rank agrees, at the same step, whether any of them got the signal.
    float stop = stop_requested() ? 1.0f : 0.0f;
    if (reducer != nullptr) {
      timing::ScopedSpan span(timing::Stage::sync, global - 1);
      reducer->all_reduce_sum(&stop, 1);
    }
    if (stop > 0 && global < setup.end_step) {
      stopped_at = global;
      break;
    }
    if (global % log_every == 0 || global == setup.end_step) {
      // Mean over model ranks and the window: every model rank reaches this at the same step.
      float buffer[2] = {static_cast<float>(window_loss), static_cast<float>(window_steps)};
      if (reducer != nullptr) {
        timing::ScopedSpan span(timing::Stage::sync, global - 1);
        reducer->all_reduce_sum(buffer, 2);
      }
      const double elapsed = seconds_since(started);
      if (speaker) {
        logger()->info("step {}/{} (epoch {}) loss {:.4f} lr {:.2e} | {:.1f} samples/s {:.0f} frames/s per rank | input wait {:.1f}%",
                       global, setup.end_step, expected.epoch, buffer[0] / buffer[1], result.lr,
                       double(samples) / elapsed, double(frames) / elapsed, 100.0 * wait_s / elapsed);
      }
      window_loss = 0;
      window_steps = 0;
    }
    context.finish->still_working();
    if (context.status != nullptr && context.status->due()) {
      const double seconds = seconds_since(interval.start);
      RankStatus status;
      status.role = to_string(setup.roles.at(session.rank()).role);
      status.step = global;
      status.end_step = setup.end_step;
      status.samples_per_s = double(interval.samples) / seconds;
      status.frames_per_s = double(interval.frames) / seconds;
      status.input_wait = interval.wait_s / seconds;
      status.seconds_per_step = interval.steps > 0 ? interval.busy_s / double(interval.steps) : 0;
      context.status->post(status);
      interval = Interval{};
    }
    if (validation_every > 0 && global % validation_every == 0 && global != setup.end_step) {
      timing::ScopedSpan span(timing::Stage::validation, global - 1);
      const double loss = validation_loss(trainer, reader, setup, model_index, plan, reducer, normalize);
      validations.push_back({{"global_step", global}, {"loss", loss}});
      if (speaker) logger()->info("validation loss {:.4f} at step {}", loss, global);
    }
    if (speaker && checkpoint_every > 0 && global % checkpoint_every == 0 && global != setup.end_step) {
      timing::ScopedSpan span(timing::Stage::checkpoint, global - 1);
      checkpoints.save(trainer, position_json(global));
    }
  }
  const double elapsed = seconds_since(started);
  const double steady_s = seconds_since(steady_started);
  if (stopped_at >= 0) {
    // Checkpoint first, then tell the data rank to stop sending.
    if (speaker) {
      checkpoints.save(trainer, position_json(stopped_at));
      logger()->warn("{} received: stopped after global step {} with a checkpoint; rerun with --resume to "
                     "continue with the next unseen batch", stop_signal_name(), stopped_at);
    }
    if (channel != nullptr) channel->close();
  } else {
    context.finish->still_working();
    const double final_validation = validation_loss(trainer, reader, setup, model_index, plan, reducer, normalize);
    context.finish->still_working();
    validations.push_back({{"global_step", setup.end_step}, {"loss", final_validation}});
    if (speaker) {
      checkpoints.save(trainer, position_json(setup.end_step));
      logger()->info("validation loss {:.4f} at step {}; checkpoint written", final_validation, setup.end_step);
    }
  }
  return {{"rank", session.rank()},
          {"role", "model"},
          {"steps", setup.end_step - setup.first_step},
          {"wall_seconds", elapsed},
          {"input_wait_seconds", wait_s},
          {"compute_seconds", compute_s},
          {"samples", samples},
          {"frames", frames},
          {"replay_from_memory", channel == nullptr},
          {"stopped_at", stopped_at},
          {"steady_steps", setup.end_step - setup.first_step - warmup},
          {"steady_seconds", steady_s},
          {"steady_padded_frames_per_second", double(steady_padded_frames) / steady_s},
          {"allreduce_baseline_bytes_per_s", allreduce_baseline},
          {"losses", losses},
          {"validation", validations}};
}

json feed_stats_json(const FeedStats& stats, int rank) {
  return {{"rank", rank},          {"role", "data"},           {"batches", stats.batches},
          {"bytes", stats.bytes},  {"read_seconds", stats.read_s}, {"collate_seconds", stats.collate_s},
          {"send_wait_seconds", stats.wait_s}, {"device_seconds", stats.device_s}, {"wall_seconds", stats.wall_s}};
}

constexpr int timeline_tag = 7320;

// The report's baseline for host transports (mpi, inproc): bytes per second of a plain memcpy of
// the plan's largest batch on this rank, best of 5.
double host_copy_bandwidth(size_t bytes) {
  std::vector<char> from(std::max<size_t>(1, bytes), 1), to(from.size());
  double best = 1e300;
  for (int i = 0; i < 5; ++i) {
    const auto begin = Clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    best = std::min(best, seconds_since(begin));
  }
  return static_cast<double>(from.size()) / std::max(best, 1e-9);
}

// Whom a rank tells that it is still working (runtime/train/finish_line.h): a model rank its data rank
// and rank 0; the first model rank, which writes the checkpoints, also the other model ranks.
std::vector<int> finish_line_watchers(const MpiSession& session, const RunSetup& setup, const RankPlacement& me) {
  std::vector<int> watchers;
  if (me.role != Role::model) return watchers;
  const auto add = [&](int rank) {
    if (rank >= 0 && rank != session.rank() && std::find(watchers.begin(), watchers.end(), rank) == watchers.end()) {
      watchers.push_back(rank);
    }
  };
  add(me.fed_by);
  add(0);
  if (!setup.model_ranks.empty() && setup.model_ranks.front() == session.rank()) {
    for (int r : setup.model_ranks) add(r);
  }
  return watchers;
}

json channel_json(const std::string& name, int peer, const char* direction, const transport::ChannelStats& stats) {
  return {{"name", name},
          {"peer", peer},
          {"direction", direction},
          {"batches", stats.batches},
          {"bytes", stats.bytes},
          {"wait_seconds", stats.wait_s},
          {"transfer_seconds", stats.transfer_s}};
}

// Who this rank is in the run, and the settings the report compares periods and limits with.
timing::RankTimeline timeline_identity(const MpiSession& session, const config::Config& config,
                                       const RankPlacement& me, const std::string& transport) {
  timing::RankTimeline timeline;
  timeline.job = "train";
  timeline.rank = session.rank();
  timeline.world_size = session.size();
  timeline.host = session.host();
  timeline.gpu = me.gpu;
  timeline.role = to_string(me.role);
  timeline.feeds = me.feeds;
  timeline.fed_by = me.fed_by;
  const json all = config.to_json();
  for (const std::string key : {"train.checkpoint_every", "train.validation_every", "train.log_every",
                                "train.credits", "train.batch_size", "train.frame_budget", "train.reader_threads",
                                "train.read_ahead", "cache.shard_size", "roles.data_per_node",
                                "runtime.timeout_s", "model.size", "model.device"}) {
    const size_t dot = key.find('.');
    timeline.settings[key] = all[key.substr(0, dot)][key.substr(dot + 1)];
  }
  timeline.settings["roles.transport"] = transport;  // resolved: inproc | mpi | cuda_ipc | nccl
  return timeline;
}

}  // namespace

int run_train(const MpiSession& session, const config::Config& config, const TrainOptions& options) {
  const fs::path run_dir = config.string("train.run_dir");
  const double timeout_s = config.number("runtime.timeout_s");
  auto reader = cache::CacheReader::open(config.string("cache.dir"));

  RunSetup setup;
  std::vector<std::string> hosts;
  for (int r = 0; r < session.size(); ++r) hosts.push_back(session.host_of(r));
  const RolePlanRequest request = role_plan_request(
      config, std::move(hosts), config.string("model.device") == "cuda" ? model::cuda_device_count() : 0);
  // Under Slurm, its view of tasks, nodes and GPUs must match the hosts the plan is built from.
  check_slurm_topology(session, config.number("runtime.timeout_s"), request.model_needs_gpu ? request.gpus_per_node : -1);
  setup.roles = plan_roles(request);
  setup.model_ranks = setup.roles.model_ranks();
  if (session.rank() == 0) {
    std::printf("%s", setup.roles.table().c_str());
    std::fflush(stdout);
    fs::create_directories(run_dir);
    config.write(run_dir / "sluice-train.yaml");
  }

  const BatchPlanConfig plan = batch_plan_config(config);
  SplitSamples split = split_samples(reader.entries(), config.number("train.validation_fraction"),
                                     static_cast<uint64_t>(config.integer("train.validation_seed")));
  setup.validation = std::move(split.validation);
  setup.schedule = std::make_unique<PlanSchedule>(std::move(split.train), plan,
                                                  static_cast<int>(setup.model_ranks.size()));
  const int64_t steps = config.integer("train.steps");
  setup.end_step = steps > 0 ? steps : config.integer("train.epochs") * setup.schedule->steps_per_epoch();
  if (session.rank() == 0) {
    std::printf("%s", setup.schedule->epoch(0)->summary().c_str());
    std::printf("training %lld global steps (%lld per epoch), %zu validation samples\n",
                static_cast<long long>(setup.end_step), static_cast<long long>(setup.schedule->steps_per_epoch()),
                setup.validation.size());
    std::fflush(stdout);
    // [verdicts branch] RUN_DIR/padding.json for the report's padding verdict (runtime/train/padding_summary.h).
    write_padding_summary(run_dir, setup.schedule->samples(), plan, static_cast<int>(setup.model_ranks.size()));
  }
  if (options.resume) {
    setup.resume_from = Checkpoints(run_dir).latest();
    if (!setup.resume_from) {
      throw ConfigError("--resume: no checkpoint in " + (run_dir / "checkpoints").string() +
                        " (train.run_dir); start without --resume");
    }
    if ((*setup.resume_from)["plan"] != setup.schedule->epoch(0)->fingerprint()) {
      throw ConfigError("--resume: the batch plan differs from the checkpoint's (the cache, the train.* "
                        "plan settings or the number of model ranks changed); resume with the same settings");
    }
    setup.first_step = (*setup.resume_from)["global_step"].get<int64_t>();
  }

  const RankPlacement& me = setup.roles.at(session.rank());
  // A GPU rank works on its own GPU from here on (see transport::set_current_device).
  if (me.gpu >= 0 && config.string("model.device") == "cuda") transport::set_current_device(me.gpu);
  const int cores = usable_cores();
  const bool unbound = cores >= static_cast<int>(std::thread::hardware_concurrency());
  const int compute_threads = std::max(1, unbound ? cores / session.local_size() : cores);
  model::set_compute_threads(compute_threads);
  const int busy = me.role == Role::model ? compute_threads
                                          : static_cast<int>(config.integer("train.reader_threads")) + 1;
  if (const std::string warning = binding_warning(busy); !warning.empty() && session.local_rank() <= 1) {
    logger()->warn("{}", warning);  // once for a data rank and once for a model rank on a node
  }

  transport::ChannelOptions channel;
  channel.slots = static_cast<int>(config.integer("train.credits"));
  channel.slot_bytes = setup.schedule->epoch(0)->max_batch_bytes(reader.n_mels());
  channel.timeout_s = timeout_s;

  // Timing: every rank records its stages; clocks are aligned to rank 0's at start and at end.
  auto& recorder = timing::SpanRecorder::global();
  RankTiming rank_timing(session, config, timeline_identity(session, config, me, setup.roles.transport));
  timing::RankTimeline& timeline = rank_timing.timeline();
  RankContext context;
  context.delay = rank_timing.delay();
  StatusBoard status(session, config.number("runtime.status_every_s"));
  context.status = &status;
  FinishLine finish(session, timeout_s, finish_line_watchers(session, setup, me));
  context.finish = &finish;

  FeedOptions feed;
  feed.reader_threads = static_cast<int>(config.integer("train.reader_threads"));
  feed.read_ahead = static_cast<int>(config.integer("train.read_ahead"));
  feed.rank = session.rank();
  feed.delay = context.delay;
  const bool replay = config.boolean("train.replay_from_memory");
  const std::string& transport = setup.roles.transport;
  // Feature work (normalisation, masks) runs on the data side: on the data rank's GPU when the
  // batches travel in device memory, else in the reader threads on the host.
  context.features = feature_settings(config, reader);
  const model::FeatureTransformSettings& features = context.features;
  const bool gpu_data = me.role == Role::data && gpu_transport(transport) && me.gpu >= 0;
  std::unique_ptr<model::FeatureTransform> host_transform, gpu_transform;
  std::unique_ptr<std::pmr::memory_resource> pinned;  // outlives the feeder and its batches
  std::unique_ptr<transport::DeviceUpload> upload;
  if (me.role != Role::model && !replay) {
    if (gpu_data) {
      // Batches are collated straight into pinned memory: the upload (or cuda_ipc's copy into
      // the model rank's slot) then runs at the bus's rate, with no staging copy.
      pinned = transport::make_pinned_memory_resource(me.gpu);
      feed.batch_memory = pinned.get();
      const double fraction = config.number("roles.data_gpu_memory_fraction");
      if (fraction > 0) {
        const double cap = fraction * static_cast<double>(transport::device_total_bytes(me.gpu));
        if (static_cast<double>(channel.slot_bytes) > cap) {
          throw ConfigError("data " + session.describe(session.rank()) + ": its GPU upload buffer of " +
                            std::to_string(channel.slot_bytes >> 20) + " MiB (the largest batch) exceeds " +
                            "roles.data_gpu_memory_fraction " + std::to_string(fraction) +
                            " of GPU " + std::to_string(me.gpu) + ": raise it or lower train.batch_size / frame_budget");
        }
        model::limit_gpu_memory(me.gpu, fraction);
      }
      const std::string device = "cuda:" + std::to_string(me.gpu);
      if (!features.mean.empty() || features.masking.active()) {
        gpu_transform = std::make_unique<model::FeatureTransform>(features, device);
      }
      // nccl sends from device memory; cuda_ipc copies host memory straight into the model
      // rank's slot, so it needs an upload only for GPU work.
      if (transport == "nccl" || gpu_transform) upload = std::make_unique<transport::DeviceUpload>(me.gpu, channel.slot_bytes);
    } else {
      host_transform = std::make_unique<model::FeatureTransform>(features, "cpu");
      if (!host_transform->active()) host_transform.reset();
    }
    if (session.rank() == setup.roles.data_ranks().front()) {
      const model::FeatureTransform* shown = gpu_transform ? gpu_transform.get() : host_transform.get();
      if (shown != nullptr) logger()->info("data ranks: {}", shown->describe());
    }
  }
  if (host_transform) {
    feed.on_collated = [&](BatchBytes& bytes, int64_t global) {
      const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
      host_transform->apply(mel_batch_of(batch, const_cast<float*>(batch.mels)), global, true);
    };
  }
  if (upload) {
    feed.to_send = [&](const BatchBytes& bytes, int64_t global, int target_rank) -> const void* {
      void* on_gpu = nullptr;
      {
        timing::ScopedSpan span(timing::Stage::host_to_device, global, target_rank);
        span.set_bytes(static_cast<int64_t>(bytes.size()));
        on_gpu = upload->upload(bytes.data(), bytes.size());
      }
      if (gpu_transform) {
        timing::ScopedSpan span(timing::Stage::gpu_work, global, target_rank);
        const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
        const auto mels_offset = reinterpret_cast<const std::byte*>(batch.mels) - bytes.data();
        gpu_transform->apply(mel_batch_of(batch, reinterpret_cast<float*>(static_cast<std::byte*>(on_gpu) + mels_offset)),
                             global, true);
      }
      return on_gpu;
    };
  }
  json rank_stats;
  try {
    if (me.role == Role::data_and_model && replay) {
      rank_stats = train_model(session, config, setup, reader, nullptr, 0, nullptr, context);
    } else if (me.role == Role::data_and_model) {
      channel.name = "feed (in-process)";
      auto pair = transport::make_inproc_channel_pair(channel);
      BatchFeeder feeder(reader, *setup.schedule, feed);  // no after_send: MPI stays on this thread
      std::exception_ptr feed_error;
      FeedStats feed_stats;
      std::thread data_thread([&] {
        recorder.name_this_thread("feeder");
        try {
          feed_stats = feeder.run(setup.first_step, setup.end_step, {{0, pair.sender.get(), session.rank()}});
        } catch (...) {
          feed_error = std::current_exception();
          pair.sender.reset();  // tells the trainer "aborted" at once instead of at its deadline
        }
      });
      try {
        rank_stats = train_model(session, config, setup, reader, pair.receiver.get(), session.rank(), nullptr, context);
      } catch (...) {
        pair.receiver->close();  // unblocks the data thread
        data_thread.join();
        throw;
      }
      data_thread.join();
      // After a stop signal the trainer shut the channel: the feed's error is the expected end.
      if (feed_error && !stop_requested()) std::rethrow_exception(feed_error);
      rank_stats["feed"] = feed_stats_json(feed_stats, session.rank());
      timeline.channels.push_back(channel_json(channel.name, session.rank(), "receive", pair.receiver->stats()));
    } else {
      // The model ranks' communicator for gradient reduction (collective over the world, once).
      MPI_Comm model_comm;
      MPI_Comm_split(session.world(), me.role == Role::model ? 1 : MPI_UNDEFINED, session.rank(), &model_comm);
      if (me.role == Role::data && replay) {
        rank_stats = json{{"rank", session.rank()}, {"role", "data"}, {"batches", 0}, {"replay_from_memory", true}};
      } else if (me.role == Role::data) {
        std::vector<std::unique_ptr<transport::SendChannel>> channels;
        std::vector<FeedTarget> targets;
        for (int model_rank : me.feeds) {
          channel.name = "feed rank " + std::to_string(session.rank()) + " -> rank " + std::to_string(model_rank);
          channels.push_back(transport == "nccl"     ? transport::make_nccl_send_channel(session, model_rank, me.gpu, channel)
                             : transport == "cuda_ipc" ? transport::make_cuda_ipc_send_channel(session, model_rank, me.gpu, channel)
                                                       : transport::make_mpi_send_channel(session, model_rank, channel));
          targets.push_back({model_index_of(setup, model_rank), channels.back().get(), model_rank});
        }
        const auto add_channels = [&] {
          for (size_t i = 0; i < channels.size(); ++i) {
            timeline.channels.push_back(channel_json("feed rank " + std::to_string(session.rank()) + " -> rank " +
                                                         std::to_string(targets[i].rank),
                                                     targets[i].rank, "send", channels[i]->stats()));
          }
        };
        feed.after_send = [&](int64_t global) {
          if (!status.due()) return;
          RankStatus mine;
          mine.role = "data";
          mine.step = global + 1;
          mine.end_step = setup.end_step;
          status.post(mine);
        };
        BatchFeeder feeder(reader, *setup.schedule, feed);
        try {
          const double copy_baseline = host_copy_bandwidth(channel.slot_bytes);
          rank_stats = feed_stats_json(feeder.run(setup.first_step, setup.end_step, targets), session.rank());
          rank_stats["transfer_baseline_bytes_per_s"] = copy_baseline;
        } catch (const TransportError& error) {
          context.waiting_for = feeder.last_target_rank();
          add_channels();
          if (!stop_requested()) throw;
          // The model ranks checkpointed and shut their channels: the expected end of a stop.
          rank_stats = json{{"rank", session.rank()}, {"role", "data"}, {"stopped", stop_signal_name()}};
        }
        if (timeline.channels.empty()) add_channels();
      } else {
        // A collective cannot tell which member is late; the others are named with their hosts,
        // which with two model ranks (or one lost node) is the culprit itself.
        std::string others;
        for (int r : setup.model_ranks) {
          if (r != session.rank()) others += (others.empty() ? "" : ", ") + session.describe(r);
        }
        MpiGradientReducer reducer(model_comm, timeout_s, others);
        channel.name = "feed rank " + std::to_string(me.fed_by) + " -> rank " + std::to_string(session.rank());
        std::unique_ptr<transport::ReceiveChannel> receiver;
        if (!replay) {
          receiver = transport == "nccl"     ? transport::make_nccl_receive_channel(session, me.fed_by, me.gpu, channel)
                     : transport == "cuda_ipc" ? transport::make_cuda_ipc_receive_channel(session, me.fed_by, me.gpu, channel)
                                               : transport::make_mpi_receive_channel(session, me.fed_by, channel);
        }
        if (setup.model_ranks.size() > 1) {
          context.measure_allreduce = [&reducer](size_t floats) { return reducer.measure_bandwidth(floats, 3); };
        }
        try {
          rank_stats = train_model(session, config, setup, reader, receiver.get(), me.fed_by,
                                   setup.model_ranks.size() > 1 ? &reducer : nullptr, context,
                                   gpu_transport(transport));
        } catch (...) {
          if (receiver) timeline.channels.push_back(channel_json(channel.name, me.fed_by, "receive", receiver->stats()));
          throw;
        }
        if (receiver) timeline.channels.push_back(channel_json(channel.name, me.fed_by, "receive", receiver->stats()));
        rank_stats["allreduce_exposed_seconds"] = reducer.exposed_seconds();
        MPI_Comm_free(&model_comm);
      }
    }
    finish.wait_for_everyone();
  } catch (const Error& error) {
    rank_timing.write_failed(run_dir, error.what(), context.waiting_for, rank_stats);
    throw;
  }
  rank_stats["peak_rss_bytes"] = peak_rss_bytes();
  fs::create_directories(run_dir / "ranks");
  write_file_atomically(run_dir / "ranks" / ("rank-" + std::to_string(session.rank()) + ".json"),
                        rank_stats.dump(2) + "\n");

  rank_timing.write_finished(run_dir, stop_requested() ? "stopped" : "finished", rank_stats, timeline_tag);
  return stop_requested() ? train_stopped : 0;
}

}  // namespace sluice::runtime
