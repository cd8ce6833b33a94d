#include "runtime/train/model_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "model/device_facts.h"
#include "model/trainer.h"
#include "runtime/train/batch_stream.h"
#include "runtime/train/batch_views.h"
#include "runtime/train/checkpoints.h"
#include "runtime/train/progress_watchdog.h"
#include "runtime/train/sample_log.h"
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

class ModelLoop {
 public:
  explicit ModelLoop(const ModelRankParts& parts);
  json run();

 private:
  model::StepResult train_step(const StreamBatch& batch);
  model::StepResult train_step_naming_the_batch(const StreamBatch& batch);
  // The mean validation loss after `done` steps (and a mixture's per corpus): a "validation" record.
  json validation_pass(int64_t done);
  void log_progress(int64_t done, const model::StepResult& result);
  void validate_and_checkpoint(int64_t done);
  void save_checkpoint(int64_t done, bool as_span = false);
  void finish();
  json summary(double elapsed, double steady_s) const;

  const MpiSession& session_;
  const TrainSettings& settings_;
  const RunSetup& setup_;
  cache::CacheReader& reader_;
  model::GradientReducer* reducer_;
  RankContext& context_;
  const bool replay_;  // train.replay_from_memory: no channel
  // The first model rank logs and checkpoints for all.
  const bool logs_and_checkpoints_;
  const model::ModelConfig model_;
  std::unique_ptr<model::Trainer> trainer_;
  BatchStream stream_;
  double allreduce_baseline_ = 0;
  Checkpoints checkpoints_;
  SampleLog sample_log_;

  // Steady state for throughput: after a warm-up of a fifth of the steps (at most 10).
  int64_t warmup_ = 0;
  Clock::time_point started_, steady_started_;
  int64_t steady_padded_frames_ = 0;
  int64_t steady_samples_ = 0;
  std::optional<double> steady_gpu_s_;  // the steady steps' GPU time (CUDA events); none on the CPU
  int gpu_lane_ = -1;         // the span recorder's "gpu" lane, once named
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  json losses_ = json::array(), validations_ = json::array();
};

ModelLoop::ModelLoop(const ModelRankParts& parts)
    : session_(parts.session), settings_(parts.settings), setup_(parts.setup), reader_(parts.reader),
      reducer_(parts.reducer), context_(parts.context), replay_(parts.feed.channel == nullptr),
      logs_and_checkpoints_(parts.setup.model_index_of(parts.session.rank()) == 0),
      model_(model_config(parts.session, parts.settings, parts.reader, parts.setup.roles.at(parts.session.rank()).gpu)),
      trainer_(std::make_unique<model::Trainer>(model_, parts.settings.optimizer, parts.settings.seed, parts.reducer)),
      stream_(parts, StepSpans::own,
              model_.device == "cpu" ? -1 : std::max(0, parts.setup.roles.at(parts.session.rank()).gpu)),
      checkpoints_(parts.settings.run_dir),
      sample_log_(parts.settings.run_dir, parts.session.rank(), parts.settings.log_samples) {
  if (logs_and_checkpoints_) logger()->info("{}", trainer_->describe());
  // The report compares the all-reduce bandwidth achieved in training with this one.
  if (context_.measure_allreduce) {
    allreduce_baseline_ = context_.measure_allreduce(static_cast<size_t>(trainer_->parameter_count()));
  }
  if (setup_.resume_from) {
    // Checked against its record again: it was chosen by its checksum, and is read whole here.
    trainer_->load_checkpoint_bytes(checkpoints_.read_verified(*setup_.resume_from),
                                    checkpoints_.file(*setup_.resume_from).string());
    stream_.set_newest_checkpoint(checkpoint_name(setup_.first_step));
    if (logs_and_checkpoints_) {
      logger()->info("resumed from {} at global step {}", (*setup_.resume_from)["file"].get<std::string>(),
                     setup_.first_step);
    }
  }
  warmup_ = std::min<int64_t>(10, (setup_.end_step - setup_.first_step) / 5);
}

json ModelLoop::run() {
  started_ = steady_started_ = Clock::now();
  while (const std::optional<StreamBatch> batch = stream_.next()) {
    const int64_t global = batch->global_step;
    if (global == setup_.first_step + warmup_) {
      steady_started_ = Clock::now();
      steady_padded_frames_ = 0;
      steady_samples_ = 0;
    }
    const auto start = Clock::now();
    // On a GPU the step ends with the loss read back, after every kernel that reads the batch:
    // the slot is free to release when it returns.
    const model::StepResult result = train_step_naming_the_batch(*batch);
    stream_.add_compute(seconds_since(start));
    steady_padded_frames_ += int64_t{batch->host.header->batch_size} * batch->host.header->max_frames;
    steady_samples_ += batch->host.header->batch_size;
    sample_log_.trained(batch->host, global);
    window_loss_ += result.loss;
    ++window_steps_;
    losses_.push_back(result.loss);
    stream_.end_step(result.loss);  // the slot goes back; the stop agreement
    if (context_.watchdog != nullptr) context_.watchdog->stepped(global);
    if (stream_.stopped()) break;
    const int64_t done = global + 1;
    if (done % settings_.log_every == 0 || done == setup_.end_step) log_progress(done, result);
    validate_and_checkpoint(done);
  }
  const double elapsed = seconds_since(started_);
  const double steady_s = seconds_since(steady_started_);
  finish();
  return summary(elapsed, steady_s);
}

// The mean loss over the validation split after `done` steps: each model rank takes its share
// (the stream's validation batches) and all-reduces (loss x samples, samples). A non-finite mean
// stops the run as a non-finite training loss does (batch_stream.h, STOP AGREEMENT); NaN without
// validation samples.
// The pass, its all-reduce included, is one validation span (the stream's).
json ModelLoop::validation_pass(int64_t done) {
  // loss x samples, samples; in all, per cache and per language (the stream's validation batches
  // mix neither).
  ValidationTally tally = stream_.make_validation_tally();
  stream_.start_validation();
  while (const std::optional<StreamBatch> batch = stream_.next_validation()) {
    const double loss = trainer_->validation_loss(view_of(batch->host));
    tally.add(loss, static_cast<double>(batch->host.header->batch_size), stream_.validation_corpus(),
              stream_.validation_language());
  }
  std::vector<float> buffer = tally.flat();
  if (reducer_ != nullptr) reducer_->all_reduce_sum(buffer.data(), buffer.size());
  stream_.end_validation();
  json record = {{"global_step", done}};
  if (buffer[1] <= 0) {
    record["loss"] = std::nan("");
    return record;
  }
  const double mean = static_cast<double>(buffer[0]) / static_cast<double>(buffer[1]);
  if (!std::isfinite(mean)) {
    stream_.stop_on_nonfinite_loss("validation", done - 1, tally.mean());
  }
  record["loss"] = mean;
  tally.describe(buffer.data(), record);
  return record;
}

// A failed step names its batch: the step, the padded shape and the sample with the longest text
// (a transcript that does not belong to its clip made every model rank fail with "tried to
// allocate 156 GiB" and nothing else; prep.max_tokens rejects such samples now).
model::StepResult ModelLoop::train_step_naming_the_batch(const StreamBatch& batch) {
  try {
    return train_step(batch);
  } catch (const Error& error) {
    const int64_t global = batch.global_step;
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
model::StepResult ModelLoop::train_step(const StreamBatch& batch) {
  const int64_t global = batch.global_step;
  const int64_t forward_start_ns = timing::now_ns();
  context_.delay.apply(timing::Stage::forward, session_.rank(), global);
  const int64_t step_start_ns = timing::now_ns();
  const model::StepResult result =
      trainer_->train_step(batch.on_device() ? view_of(batch.device_batch()) : view_of(batch.host));
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
                   result.lr, double(stream_.tally().samples()) / elapsed, double(stream_.tally().frames()) / elapsed,
                   100.0 * stream_.tally().wait_s() / elapsed);
  }
  window_loss_ = 0;
  window_steps_ = 0;
}

// Between steps (the end of the run validates and checkpoints in finish()).
void ModelLoop::validate_and_checkpoint(int64_t done) {
  if (stream_.validation_due(done)) {
    const ProgressWatchdog::PhaseScope phase(context_.watchdog, ProgressWatchdog::Phase::validation);
    const json record = validation_pass(done);
    const double loss = record["loss"].get<double>();
    validations_.push_back(record);
    if (logs_and_checkpoints_) logger()->info("validation loss {:.4f} at step {}", loss, done);
  }
  if (settings_.checkpoint_every > 0 && done % settings_.checkpoint_every == 0 && done != setup_.end_step) {
    save_checkpoint(done, /*as_span=*/true);
  }
}

// The first model rank writes it; every model rank knows it as the newest from here on. A
// periodic one (`as_span`: a checkpoint span in the timeline, the step time it costs) is written
// in the background (checkpoints.h: the step waits for the copy of the state only); the one that
// ends the run, or a stop, before the run goes on.
void ModelLoop::save_checkpoint(int64_t done, bool as_span) {
  if (logs_and_checkpoints_) {
    const ProgressWatchdog::PhaseScope phase(context_.watchdog, ProgressWatchdog::Phase::checkpoint);
    std::optional<timing::ScopedSpan> span;
    if (as_span) span.emplace(timing::Stage::checkpoint, done - 1);
    nlohmann::json position = checkpoint_position(*setup_.schedule, done);
    // The trainer's bytes first: a state that is not finite is refused before anything is written.
    std::string bytes = trainer_->checkpoint_bytes(position);
    if (as_span) {
      checkpoints_.save_in_background(std::move(bytes), std::move(position));
    } else {
      checkpoints_.save(bytes, position);
    }
  }
  stream_.set_newest_checkpoint(checkpoint_name(done));
}

void ModelLoop::finish() {
  if (stream_.stopped()) {
    // Checkpoint first, then tell the data rank to stop sending (the stream's close).
    save_checkpoint(stream_.stopped_at());
    if (logs_and_checkpoints_) {
      logger()->warn("{}: stopped after global step {} with a checkpoint; rerun with --resume to continue with the "
                     "next unseen batch",
                     stop_requested() ? std::string(stop_signal_name()) + " received"
                                      : std::string("a stop signal on another rank"),
                     stream_.stopped_at());
    }
    stream_.close();
    return;
  }
  context_.finish->still_working();
  json record;
  {
    const ProgressWatchdog::PhaseScope phase(context_.watchdog, ProgressWatchdog::Phase::validation);
    record = validation_pass(setup_.end_step);
  }
  const double final_loss = record["loss"].get<double>();
  context_.finish->still_working();
  validations_.push_back(record);
  save_checkpoint(setup_.end_step);
  if (logs_and_checkpoints_) logger()->info("validation loss {:.4f} at step {}; checkpoint written", final_loss, setup_.end_step);
  stream_.close();
}

json ModelLoop::summary(double elapsed, double steady_s) const {
  const StepTally& tally = stream_.tally();
  return {{"rank", session_.rank()},
          {"role", "model"},
          {"steps", setup_.end_step - setup_.first_step},
          {"wall_seconds", elapsed},
          {"input_wait_seconds", tally.wait_s()},
          {"compute_seconds", tally.compute_s()},
          {"samples", tally.samples()},
          {"frames", tally.frames()},
          {"replay_from_memory", replay_},
          {"stopped_at", stream_.stopped_at()},
          {"steady_steps", setup_.end_step - setup_.first_step - warmup_},
          {"steady_seconds", steady_s},
          {"steady_padded_frames_per_second", double(steady_padded_frames_) / steady_s},
          {"steady_samples_per_second", double(steady_samples_) / steady_s},
          // The share of the steady time the GPU spent on the steps' work (CUDA events); null on the CPU.
          {"steady_gpu_busy_fraction", steady_gpu_s_ ? json(*steady_gpu_s_ / steady_s) : json(nullptr)},
          {"allreduce_baseline_bytes_per_s", allreduce_baseline_},
          {"losses", losses_},
          {"validation", validations_},
          // Writing the periodic checkpoints took this long on the writer thread, off the steps.
          {"checkpoint_background_seconds", checkpoints_.background_seconds()}};
}

}  // namespace

json train_model(const ModelRankParts& parts) { return ModelLoop(parts).run(); }

}  // namespace sluice::runtime
