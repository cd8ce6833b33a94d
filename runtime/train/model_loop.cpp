#include "runtime/train/model_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "model/device_facts.h"
#include "model/trainer.h"
#include "runtime/train/batch_assembler.h"
#include "runtime/train/batch_views.h"
#include "runtime/train/checkpoints.h"
#include "runtime/train/sample_log.h"
#include "runtime/train/step_tally.h"
#include "runtime/transport/device_memory.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {
namespace {

using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

std::string checkpoint_name(int64_t global_step) {
  char name[80];
  std::snprintf(name, sizeof(name), "step-%010lld.pt (global step %lld)", static_cast<long long>(global_step),
                static_cast<long long>(global_step));
  return name;
}

// Batches collated once per bucket and kept in memory: the baseline of the input-pipeline
// efficiency benchmark (train.replay_from_memory). Same shapes in the same order as the real
// feed, no cache reads, no transport. On a GPU model rank (`gpu` >= 0) the batches are uploaded
// once and stay in device memory, as a fed batch arrives there.
class ReplayBatches {
 public:
  ReplayBatches(cache::CacheReader& reader, const PlanSchedule& schedule, int model_index, int gpu,
                int64_t first_step)
      : schedule_(schedule), model_index_(model_index) {
    BatchAssembler assembler(reader);
    // Two epochs' worth of steps from the first hold one whole epoch, so every bucket, even when
    // the first is the shorter rest of an epoch (an elastic resume).
    for (int64_t step = first_step; step < first_step + 2 * schedule.steps_per_epoch(); ++step) {
      const ScheduledBatch scheduled = schedule.batch(step, model_index);
      auto& bytes = by_bucket_[scheduled.batch->bucket];
      if (!bytes.empty()) continue;
      assembler.assemble(scheduled, bytes);
      if (gpu >= 0) {
        auto& uploaded = on_device_[scheduled.batch->bucket];
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
    const ScheduledBatch scheduled = schedule_.batch(global, model_index_);
    auto& bytes = by_bucket_.at(scheduled.batch->bucket);
    // The header carries the position the loop checks; the payload is the bucket's batch.
    auto* header = reinterpret_cast<BatchHeader*>(bytes.data());
    header->epoch = scheduled.at.epoch;
    header->step = scheduled.at.step;
    return BatchPointers::of(bytes.data(), bytes.size());
  }

 private:
  const PlanSchedule& schedule_;
  int model_index_;
  std::map<int32_t, BatchBytes> by_bucket_;
  std::map<int32_t, std::unique_ptr<transport::DeviceUpload>> on_device_;
};

// The mean loss over the validation split, each model rank taking every n-th sample (n = model
// ranks) and all-reducing (loss x samples, samples). Batches are normalised as training batches
// are, never masked.
double mean_validation_loss(model::Trainer& trainer, cache::CacheReader& reader, const RunSetup& setup,
                            int model_index, int batch_size, model::GradientReducer* reducer,
                            const model::FeatureTransform& normalize) {
  double sums[2] = {0, 0};  // loss x samples, samples
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(model_index); i < setup.validation.size(); i += setup.model_ranks.size()) {
    mine.push_back(setup.validation[i].index);
  }
  const size_t per_batch = static_cast<size_t>(std::max(1, batch_size));
  BatchAssembler assembler(reader);
  BatchBytes bytes;
  for (size_t begin = 0; begin < mine.size(); begin += per_batch) {
    const std::vector<int64_t> indices(mine.begin() + static_cast<ptrdiff_t>(begin),
                                       mine.begin() + static_cast<ptrdiff_t>(std::min(mine.size(), begin + per_batch)));
    assembler.assemble_unplanned(indices, bytes);
    const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
    normalize.apply(mel_batch_of(batch, const_cast<float*>(batch.mels)), -1, false);
    const double loss = trainer.validation_loss(view_of(batch));
    sums[0] += loss * static_cast<double>(indices.size());
    sums[1] += static_cast<double>(indices.size());
  }
  if (reducer != nullptr) {
    float buffer[2] = {static_cast<float>(sums[0]), static_cast<float>(sums[1])};
    reducer->all_reduce_sum(buffer, 2);
    sums[0] = buffer[0];
    sums[1] = buffer[1];
  }
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
}

// The model's settings on this rank: the cache's vocabulary and mel bins, the rank's GPU (cuda:N)
// or the CPU. On a GPU it caps torch's memory at roles.model_gpu_memory_fraction.
model::ModelConfig model_config(const MpiSession& session, const TrainSettings& settings,
                                const cache::CacheReader& reader, int gpu) {
  model::ModelConfig model = settings.model;
  model.vocab_size = static_cast<int>(reader.manifest()["vocabulary"]["symbols"].size());
  model.n_mels = reader.n_mels();
  model.device = settings.model_on_gpu() ? "cuda:" + std::to_string(std::max(0, gpu)) : "cpu";
  model.bf16_autocast = model.device != "cpu" && settings.bf16;
  const double memory_fraction = settings.roles.model_gpu_memory_fraction;
  if (model.device != "cpu" && memory_fraction > 0) {
    const int64_t cap = model::limit_gpu_memory(std::max(0, gpu), memory_fraction);
    logger()->info("rank {}: torch may take {:.1f} GiB ({:.0f}%) of GPU {} (roles.model_gpu_memory_fraction)",
                   session.rank(), double(cap) / double(1 << 30), 100 * memory_fraction, std::max(0, gpu));
  }
  return model;
}

// Validation batches are normalised on this rank's CPU, as the data ranks normalise training
// ones; never masked.
std::unique_ptr<model::FeatureTransform> validation_normalizer(model::FeatureTransformSettings features) {
  features.masking = {};
  return std::make_unique<model::FeatureTransform>(std::move(features), "cpu");
}

// One received (or replayed) batch: where its bytes are on the host and, when it arrived in
// device memory, there.
struct LoopBatch {
  std::optional<transport::ReceivedBatch> received;  // the channel's slot, until released
  std::optional<DeviceBatch> on_device;
  BatchPointers host{};
};

class ModelLoop {
 public:
  ModelLoop(const MpiSession& session, const TrainSettings& settings, const RunSetup& setup,
            cache::CacheReader& reader, const ModelFeed& feed, model::GradientReducer* reducer,
            RankContext& context);
  json run();

 private:
  LoopBatch next_batch(int64_t global);
  std::optional<transport::ReceivedBatch> receive(int64_t global);
  void check_position(const BatchPointers& batch, int64_t global) const;
  model::StepResult train_step(const model::BatchView& batch, int64_t global);
  model::StepResult train_step_naming_the_batch(const LoopBatch& batch, int64_t global);
  void count(const BatchPointers& batch);
  bool agree_to_stop(int64_t done, double loss);
  [[noreturn]] void stop_on_nonfinite_loss(int64_t global, double loss);
  void log_progress(int64_t done, const model::StepResult& result);
  void post_status(int64_t done);
  void validate_and_checkpoint(int64_t done);
  void finish(int64_t stopped_at);
  json summary(int64_t stopped_at, double elapsed, double steady_s) const;

  const MpiSession& session_;
  const TrainSettings& settings_;
  const RunSetup& setup_;
  cache::CacheReader& reader_;
  const ModelFeed feed_;
  model::GradientReducer* reducer_;
  RankContext& context_;
  const int model_index_;
  // The first model rank logs and checkpoints for all.
  const bool logs_and_checkpoints_;
  std::unique_ptr<model::FeatureTransform> normalize_;
  std::unique_ptr<model::Trainer> trainer_;
  double allreduce_baseline_ = 0;
  Checkpoints checkpoints_;
  // The newest checkpoint of this run ("step-N.pt (global step N)"), known on every model rank:
  // the one resumed from, then each one the first model rank writes at steps all ranks know.
  std::string last_checkpoint_;
  SampleLog sample_log_;
  std::unique_ptr<ReplayBatches> replay_;
  bool data_rank_stop_ = false;  // a batch said its data rank got a stop signal

  // Steady state for throughput: after a warm-up of a fifth of the steps (at most 10).
  int64_t warmup_ = 0;
  Clock::time_point started_, steady_started_;
  int64_t steady_padded_frames_ = 0;
  int64_t steady_samples_ = 0;
  std::optional<double> steady_gpu_s_;  // the steady steps' GPU time (CUDA events); none on the CPU
  int gpu_lane_ = -1;         // the span recorder's "gpu" lane, once named
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  StepTally tally_;  // totals, and the live status's interval since the last post
  json losses_ = json::array(), validations_ = json::array();
};

ModelLoop::ModelLoop(const MpiSession& session, const TrainSettings& settings, const RunSetup& setup,
                     cache::CacheReader& reader, const ModelFeed& feed, model::GradientReducer* reducer,
                     RankContext& context)
    : session_(session), settings_(settings), setup_(setup), reader_(reader), feed_(feed), reducer_(reducer),
      context_(context), model_index_(setup.model_index_of(session.rank())),
      logs_and_checkpoints_(model_index_ == 0), checkpoints_(settings.run_dir),
      sample_log_(settings.run_dir, session.rank(), settings.log_samples) {
  const int gpu = setup.roles.at(session.rank()).gpu;
  const model::ModelConfig model = model_config(session, settings, reader, gpu);
  normalize_ = validation_normalizer(context.features);
  trainer_ = std::make_unique<model::Trainer>(model, settings.optimizer, settings.seed, reducer);
  if (logs_and_checkpoints_) logger()->info("{}", trainer_->describe());
  // The report compares the all-reduce bandwidth achieved in training with this one.
  if (context.measure_allreduce) {
    allreduce_baseline_ = context.measure_allreduce(static_cast<size_t>(trainer_->parameter_count()));
  }
  if (setup.resume_from) {
    // Checked against its record again: it was chosen by its checksum, and is read whole here.
    trainer_->load_checkpoint_bytes(checkpoints_.read_verified(*setup.resume_from),
                                    checkpoints_.file(*setup.resume_from).string());
    last_checkpoint_ = checkpoint_name(setup.first_step);
    if (logs_and_checkpoints_) {
      logger()->info("resumed from {} at global step {}", (*setup.resume_from)["file"].get<std::string>(),
                     setup.first_step);
    }
  }
  if (feed.channel == nullptr) {
    replay_ = std::make_unique<ReplayBatches>(reader, *setup.schedule, model_index_,
                                              model.device == "cpu" ? -1 : std::max(0, gpu), setup.first_step);
  }
  warmup_ = std::min<int64_t>(10, (setup.end_step - setup.first_step) / 5);
}

json ModelLoop::run() {
  started_ = steady_started_ = Clock::now();
  tally_.restart_interval();
  int64_t stopped_at = -1;  // the step a stop signal ended the run at, if one did
  for (int64_t global = setup_.first_step; global < setup_.end_step;) {
    if (global == setup_.first_step + warmup_) {
      steady_started_ = Clock::now();
      steady_padded_frames_ = 0;
      steady_samples_ = 0;
    }
    const LoopBatch batch = next_batch(global);
    const auto start = Clock::now();
    // On a GPU the step ends with the loss read back, after every kernel that reads the batch:
    // the slot is free to release when it returns.
    const model::StepResult result = train_step_naming_the_batch(batch, global);
    tally_.add_compute(seconds_since(start));
    count(batch.host);
    sample_log_.trained(batch.host, global);
    if (feed_.channel != nullptr) feed_.channel->release(*batch.received);
    ++global;
    window_loss_ += result.loss;
    ++window_steps_;
    losses_.push_back(result.loss);
    if (agree_to_stop(global, result.loss) && global < setup_.end_step) {
      stopped_at = global;
      context_.stopped = true;
      break;
    }
    if (global % settings_.log_every == 0 || global == setup_.end_step) log_progress(global, result);
    context_.finish->still_working();
    post_status(global);
    validate_and_checkpoint(global);
  }
  const double elapsed = seconds_since(started_);
  const double steady_s = seconds_since(steady_started_);
  finish(stopped_at);
  return summary(stopped_at, elapsed, steady_s);
}

// Receives (or replays) the batch of `global`, checked against the plan.
LoopBatch ModelLoop::next_batch(int64_t global) {
  const auto start = Clock::now();
  LoopBatch batch;
  const int64_t wait_start_ns = timing::now_ns();
  batch.received = receive(global);
  timing::Span span;
  span.stage = timing::Stage::batch_wait;
  span.start_ns = wait_start_ns;
  span.end_ns = timing::now_ns();
  span.step = global;
  span.peer = feed_.data_rank;
  if (batch.received) {
    span.sequence = static_cast<int64_t>(batch.received->sequence);
    span.bytes = static_cast<int64_t>(batch.received->bytes);
  }
  timing::SpanRecorder::global().record(span);
  tally_.add_wait(seconds_since(start));
  if (batch.received && feed_.device_batches) {
    batch.on_device = DeviceBatch::of(batch.received->data, batch.received->bytes, &transport::copy_device_to_host);
  }
  batch.host = replay_             ? replay_->at(global)
               : batch.on_device ? batch.on_device->host
                                 : BatchPointers::of(batch.received->data, batch.received->bytes);
  if (replay_) batch.on_device = replay_->on_device(batch.host);
  check_position(batch.host, global);
  data_rank_stop_ = data_rank_stop_ || batch.host.header->data_rank_stop != 0;
  return batch;
}

// The next batch from the channel; nullopt when replaying. Says whom this rank waited for when
// the wait fails, in the run's terms: the data rank and the global step.
std::optional<transport::ReceivedBatch> ModelLoop::receive(int64_t global) {
  std::optional<transport::ReceivedBatch> received;
  if (feed_.channel != nullptr) {
    context_.waiting_for = feed_.data_rank;
    try {
      received = feed_.channel->receive();
    } catch (const TransportError& error) {
      throw error.carry_marks_to(TransportError("model " + session_.describe(session_.rank()) +
                                                " waiting for global step " + std::to_string(global) +
                                                " from its data " + session_.describe(feed_.data_rank) + ": " +
                                                error.what()));
    }
    if (!received) {
      throw TransportError("the feed from " + session_.describe(feed_.data_rank) + " ended at global step " +
                           std::to_string(global) + " of " + std::to_string(setup_.end_step));
    }
  }
  context_.waiting_for = -1;
  return received;
}

void ModelLoop::check_position(const BatchPointers& batch, int64_t global) const {
  const PlanPosition expected = setup_.schedule->position(global);
  if (batch.header->epoch != expected.epoch || batch.header->step != expected.step) {
    throw TransportError("received epoch " + std::to_string(batch.header->epoch) + " step " +
                         std::to_string(batch.header->step) + " from " + session_.describe(feed_.data_rank) +
                         ", expected epoch " + std::to_string(expected.epoch) + " step " +
                         std::to_string(expected.step) + ": data and model ranks disagree on the plan");
  }
}

// A failed step names its batch: the step, the padded shape and the sample with the longest text
// (a transcript that does not belong to its clip made every model rank fail with "tried to
// allocate 156 GiB" and nothing else; prep.max_tokens rejects such samples now).
model::StepResult ModelLoop::train_step_naming_the_batch(const LoopBatch& batch, int64_t global) {
  try {
    return train_step(batch.on_device ? view_of(*batch.on_device) : view_of(batch.host), global);
  } catch (const Error& error) {
    const BatchHeader& header = *batch.host.header;
    std::string where = " (global step " + std::to_string(global) + ", epoch " + std::to_string(header.epoch) +
                        " step " + std::to_string(header.step) + ": a batch of " + std::to_string(header.batch_size) +
                        " samples padded to " + std::to_string(header.max_frames) + " frames x " +
                        std::to_string(header.max_tokens) + " tokens";
    // A bucket pads every batch to its longest sample (batch_plan.h): the text that set the
    // padding is the cache's longest within it, wherever that sample's own batch falls.
    const cache::IndexEntry* longest = nullptr;
    for (const cache::IndexEntry& entry : reader_.entries()) {
      if (entry.n_tokens <= header.max_tokens && (longest == nullptr || entry.n_tokens > longest->n_tokens)) {
        longest = &entry;
      }
    }
    if (longest != nullptr) {
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.2f", longest->seconds);
      where += ", the tokens set by its bucket's longest text: sample " + longest->id + ", " +
               std::to_string(longest->n_tokens) + " tokens for " + seconds + " s of audio";
    }
    throw error.carry_marks_to(Error(error.kind(), std::string(error.what()) + where + ")"));
  }
}

// One step of the trainer, with the injected delays around it and its phases as spans.
model::StepResult ModelLoop::train_step(const model::BatchView& batch, int64_t global) {
  const int64_t forward_start_ns = timing::now_ns();
  context_.delay.apply(timing::Stage::forward, session_.rank(), global);
  const int64_t step_start_ns = timing::now_ns();
  const model::StepResult result = trainer_->train_step(batch);
  context_.delay.apply(timing::Stage::optimizer, session_.rank(), global);
  // The trainer times its phases; laid end to end from the step's start they are its spans.
  auto& recorder = timing::SpanRecorder::global();
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
  // The GPU's own time for the step (CUDA events), on a lane of its own: it overlaps the phases.
  if (result.gpu_s >= 0) {
    timing::Span gpu;
    gpu.stage = timing::Stage::gpu_step;
    gpu.step = global;
    gpu.start_ns = step_start_ns + static_cast<int64_t>(result.gpu_start_s * 1e9);
    gpu.end_ns = gpu.start_ns + static_cast<int64_t>(result.gpu_s * 1e9);
    if (gpu_lane_ < 0) gpu_lane_ = recorder.named_lane("gpu");
    recorder.record_on(static_cast<uint16_t>(gpu_lane_), gpu);
    if (global >= setup_.first_step + warmup_) steady_gpu_s_ = steady_gpu_s_.value_or(0) + result.gpu_s;
  }
  return result;
}

void ModelLoop::count(const BatchPointers& batch) {
  tally_.count(batch);
  steady_padded_frames_ += int64_t{batch.header->batch_size} * batch.header->max_frames;
  steady_samples_ += batch.header->batch_size;
}

// Every model rank agrees, at the same step, whether any of them got a stop signal (preemption),
// or a batch from a data rank that got one (BatchHeader::data_rank_stop), and whether any of
// them saw a non-finite loss: one all-reduce of two floats per step. A
// non-finite loss ends the run on every model rank at once (stop_on_nonfinite_loss), before
// anything is logged or checkpointed from the diverged state.
bool ModelLoop::agree_to_stop(int64_t done, double loss) {
  float flags[2] = {stop_requested() || data_rank_stop_ ? 1.0f : 0.0f, std::isfinite(loss) ? 0.0f : 1.0f};
  if (reducer_ != nullptr) {
    timing::ScopedSpan span(timing::Stage::sync, done - 1);
    reducer_->all_reduce_sum(flags, 2);
  }
  if (flags[1] > 0) stop_on_nonfinite_loss(done - 1, loss);
  return flags[0] > 0;
}

// Names the step and the model ranks whose loss was inf or NaN (a second all-reduce, one float
// per model rank, which every model rank makes at the same step) and throws. No checkpoint is
// written from here on, so the newest one, named in the message, is the state to resume from.
void ModelLoop::stop_on_nonfinite_loss(int64_t global, double loss) {
  std::vector<float> nonfinite(setup_.model_ranks.size(), 0.0f);
  nonfinite[static_cast<size_t>(model_index_)] = std::isfinite(loss) ? 0.0f : 1.0f;
  if (reducer_ != nullptr) reducer_->all_reduce_sum(nonfinite.data(), nonfinite.size());
  std::string ranks;
  for (size_t i = 0; i < nonfinite.size(); ++i) {
    if (nonfinite[i] > 0) ranks += (ranks.empty() ? "" : ", ") + session_.describe(setup_.model_ranks[i]);
  }
  const PlanPosition at = setup_.schedule->position(global);
  const std::string here = std::isfinite(loss) ? "" : std::isnan(loss) ? " (nan here)" : " (inf here)";
  // Its weights are finite (the trainer checks) but gave this loss: it may be too far gone.
  const std::string newest = last_checkpoint_.empty()
                                 ? "none was written yet"
                                 : "the newest, " + last_checkpoint_ +
                                       ", holds the last finite state (resume from an older one if it diverges again)";
  throw Error(ErrorKind::internal,
              "the training loss is not finite at global step " + std::to_string(global) + " (epoch " +
                  std::to_string(at.epoch) + " step " + std::to_string(at.step) + ") on model " + ranks + here +
                  ": training diverged (optim.lr too high? optim.grad_clip off?) or the batch holds non-finite "
                  "features. Stopped without writing a checkpoint; " + newest + ". Fix the cause, then --resume");
}

// The mean loss over model ranks and the window: every model rank reaches this at the same step.
void ModelLoop::log_progress(int64_t done, const model::StepResult& result) {
  float buffer[2] = {static_cast<float>(window_loss_), static_cast<float>(window_steps_)};
  if (reducer_ != nullptr) {
    timing::ScopedSpan span(timing::Stage::sync, done - 1);
    reducer_->all_reduce_sum(buffer, 2);
  }
  const double elapsed = seconds_since(started_);
  if (logs_and_checkpoints_) {
    logger()->info("step {}/{} (epoch {}) loss {:.4f} lr {:.2e} | {:.1f} samples/s {:.0f} frames/s per rank | input wait {:.1f}%",
                   done, setup_.end_step, setup_.schedule->position(done - 1).epoch, buffer[0] / buffer[1],
                   result.lr, double(tally_.samples()) / elapsed, double(tally_.frames()) / elapsed,
                   100.0 * tally_.wait_s() / elapsed);
  }
  window_loss_ = 0;
  window_steps_ = 0;
}

void ModelLoop::post_status(int64_t done) {
  if (context_.status == nullptr || !context_.status->due()) return;
  context_.status->post(tally_.take_status(to_string(setup_.roles.at(session_.rank()).role), done, setup_.end_step));
}

// Between steps (the end of the run validates and checkpoints in finish()).
void ModelLoop::validate_and_checkpoint(int64_t done) {
  if (settings_.validation_every > 0 && done % settings_.validation_every == 0 && done != setup_.end_step) {
    timing::ScopedSpan span(timing::Stage::validation, done - 1);
    const double loss = mean_validation_loss(*trainer_, reader_, setup_, model_index_, settings_.plan.batch_size,
                                             reducer_, *normalize_);
    validations_.push_back({{"global_step", done}, {"loss", loss}});
    if (logs_and_checkpoints_) logger()->info("validation loss {:.4f} at step {}", loss, done);
  }
  if (settings_.checkpoint_every > 0 && done % settings_.checkpoint_every == 0 && done != setup_.end_step) {
    if (logs_and_checkpoints_) {
      timing::ScopedSpan span(timing::Stage::checkpoint, done - 1);
      checkpoints_.save(*trainer_, checkpoint_position(*setup_.schedule, done));
    }
    last_checkpoint_ = checkpoint_name(done);
  }
}

void ModelLoop::finish(int64_t stopped_at) {
  if (stopped_at >= 0) {
    // Checkpoint first, then tell the data rank to stop sending.
    if (logs_and_checkpoints_) {
      checkpoints_.save(*trainer_, checkpoint_position(*setup_.schedule, stopped_at));
      logger()->warn("{}: stopped after global step {} with a checkpoint; rerun with --resume to continue with the "
                     "next unseen batch",
                     stop_requested() ? std::string(stop_signal_name()) + " received"
                                      : std::string("a stop signal on another rank"),
                     stopped_at);
    }
    if (feed_.channel != nullptr) feed_.channel->close();
    return;
  }
  context_.finish->still_working();
  const double final_loss = mean_validation_loss(*trainer_, reader_, setup_, model_index_, settings_.plan.batch_size,
                                                 reducer_, *normalize_);
  context_.finish->still_working();
  validations_.push_back({{"global_step", setup_.end_step}, {"loss", final_loss}});
  if (logs_and_checkpoints_) {
    checkpoints_.save(*trainer_, checkpoint_position(*setup_.schedule, setup_.end_step));
    logger()->info("validation loss {:.4f} at step {}; checkpoint written", final_loss, setup_.end_step);
  }
}

json ModelLoop::summary(int64_t stopped_at, double elapsed, double steady_s) const {
  return {{"rank", session_.rank()},
          {"role", "model"},
          {"steps", setup_.end_step - setup_.first_step},
          {"wall_seconds", elapsed},
          {"input_wait_seconds", tally_.wait_s()},
          {"compute_seconds", tally_.compute_s()},
          {"samples", tally_.samples()},
          {"frames", tally_.frames()},
          {"replay_from_memory", feed_.channel == nullptr},
          {"stopped_at", stopped_at},
          {"steady_steps", setup_.end_step - setup_.first_step - warmup_},
          {"steady_seconds", steady_s},
          {"steady_padded_frames_per_second", double(steady_padded_frames_) / steady_s},
          {"steady_samples_per_second", double(steady_samples_) / steady_s},
          // The share of the steady time the GPU spent on the steps' work (CUDA events); null on the CPU.
          {"steady_gpu_busy_fraction", steady_gpu_s_ ? json(*steady_gpu_s_ / steady_s) : json(nullptr)},
          {"allreduce_baseline_bytes_per_s", allreduce_baseline_},
          {"losses", losses_},
          {"validation", validations_}};
}

}  // namespace

json train_model(const MpiSession& session, const TrainSettings& settings, const RunSetup& setup,
                 cache::CacheReader& reader, const ModelFeed& feed, model::GradientReducer* reducer,
                 RankContext& context) {
  return ModelLoop(session, settings, setup, reader, feed, reducer, context).run();
}

}  // namespace sluice::runtime
