#include "runtime/train/batch_stream.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/log.h"
#include "common/stop_signal.h"
#include "runtime/train/batch_views.h"
#include "runtime/train/progress_watchdog.h"
#include "runtime/train/replay_batches.h"
#include "runtime/transport/device_memory.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {

using nlohmann::json;

BatchStream::BatchStream(const ModelRankParts& parts, StepSpans spans, int replay_gpu)
    : parts_(parts), spans_(spans), model_index_(parts.setup.model_index_of(parts.session.rank())),
      next_step_(parts.setup.first_step), validation_tally_(make_validation_tally()) {
  if (parts.feed.channel == nullptr) {
    replay_ = std::make_unique<ReplayBatches>(parts.reader, *parts.setup.schedule, model_index_, replay_gpu,
                                              parts.setup.first_step);
  }
  const size_t model_ranks = parts.setup.model_ranks.size();
  for (size_t i = static_cast<size_t>(model_index_); i < parts.setup.validation.size(); i += model_ranks) {
    validation_indices_.push_back(parts.setup.validation[i].index);
  }
  // Each cache's samples are together (index order); within one, each language's, so that a
  // validation batch is one language's (next_validation()).
  if (parts.reader.languages().size() > 1) {
    const auto language = [&](int64_t index) { return parts.reader.entry(index).language; };
    std::stable_sort(validation_indices_.begin(), validation_indices_.end(), [&](int64_t a, int64_t b) {
      const size_t corpus_a = parts.reader.corpus_of(a), corpus_b = parts.reader.corpus_of(b);
      return corpus_a != corpus_b ? corpus_a < corpus_b : language(a) < language(b);
    });
  }
  started_ = Clock::now();
  tally_.restart_interval();
}

BatchStream::~BatchStream() = default;

ValidationTally BatchStream::make_validation_tally() const {
  return ValidationTally(parts_.reader.corpora(), parts_.reader.languages());
}

std::optional<StreamBatch> BatchStream::next() {
  if (closed_) throw TransportError("next batch asked of a closed feed (after close() or a failure)");
  end_step(reported_loss_);
  parts_.context.finish->still_working();
  post_status();
  if (next_step_ >= parts_.setup.end_step || stopped()) return std::nullopt;
  release_returned(false);
  check_slots_left();

  const auto wait_start = Clock::now();
  StreamBatch batch;
  batch.global_step = next_step_;
  batch.host = receive_or_replay(batch);
  tally_.add_wait(seconds_since(wait_start));
  check_position(batch.host);
  data_rank_stop_ = data_rank_stop_ || batch.host.header->data_rank_stop != 0;
  batch.epoch = batch.host.header->epoch;
  batch.step = batch.host.header->step;
  tally_.count(batch.host);
  step_open_ = true;
  span_open_ = spans_ == StepSpans::script;
  step_marked_ = false;
  reported_loss_.reset();
  ++next_step_;
  if (spans_ == StepSpans::own) return batch;
  if (current_) lease_ = std::make_shared<const int>(0);
  // An injected forward delay (debug.delay_stage) is this rank's compute: its own forward span,
  // whether or not the script marks spans.
  const int64_t delay_start_ns = timing::now_ns();
  parts_.context.delay.apply(timing::Stage::forward, parts_.session.rank(), batch.global_step);
  step_start_ns_ = timing::now_ns();
  marked_until_ns_ = step_start_ns_;
  if (step_start_ns_ - delay_start_ns > 1000000) {
    timing::Span delay;
    delay.stage = timing::Stage::forward;
    delay.start_ns = delay_start_ns;
    delay.end_ns = step_start_ns_;
    delay.step = batch.global_step;
    timing::SpanRecorder::global().record(delay);
  }
  return batch;
}

// The batch of next_step_, from the channel or the replay, with its batch_wait span.
BatchPointers BatchStream::receive_or_replay(StreamBatch& batch) {
  timing::Span span;
  span.stage = timing::Stage::batch_wait;
  span.start_ns = timing::now_ns();
  span.step = next_step_;
  span.peer = parts_.feed.data_rank;
  BatchPointers host;
  if (replay_) {
    host = replay_->at(next_step_);
    if (auto uploaded = replay_->on_device(host)) {
      batch.device = uploaded->device;
      batch.gpu = parts_.setup.roles.at(parts_.session.rank()).gpu;
    }
  } else {
    current_ = receive();
    span.sequence = static_cast<int64_t>(current_->sequence);
    span.bytes = static_cast<int64_t>(current_->bytes);
    if (parts_.feed.device_batches) {
      device_batch_ = DeviceBatch::of(current_->data, current_->bytes, &transport::copy_device_to_host);
      host = device_batch_->host;
      batch.device = device_batch_->device;
      batch.gpu = parts_.setup.roles.at(parts_.session.rank()).gpu;
    } else {
      host = BatchPointers::of(current_->data, current_->bytes);
    }
  }
  span.end_ns = timing::now_ns();
  timing::SpanRecorder::global().record(span);
  return host;
}

void BatchStream::end_step(std::optional<double> loss) {
  if (!step_open_) return;
  step_open_ = false;
  end_step_span();
  release_slot();
  agree(loss.value_or(0.0));
}

void BatchStream::report_loss(double loss) {
  if (validation_start_ns_ >= 0) {
    validation_tally_.add(loss, static_cast<double>(validation_batch_size_), validation_corpus_, validation_language_);
    return;
  }
  // A non-finite loss reported anywhere in the step stays the step's.
  if (!reported_loss_ || std::isfinite(*reported_loss_)) reported_loss_ = loss;
}

// The current batch's slot goes back now, or, while the script still holds tensors made from it
// (its lease), once they are freed (LEASES).
void BatchStream::release_slot() {
  if (!current_) return;
  std::weak_ptr<const void> lease = lease_;
  lease_.reset();
  if (!lease.expired()) {
    if (!said_held_) {
      log::get("runtime")->warn(
          "model {}: the script keeps tensors of global step {} past its step: their slot goes back to the data "
          "rank when they are freed, and until then the data rank reads ahead one batch less (train.credits = {}); "
          ".clone() what you keep",
          parts_.session.describe(parts_.session.rank()), next_step_ - 1, parts_.settings.credits);
      said_held_ = true;
    }
    held_.push_back({*current_, std::move(device_batch_), std::move(lease), next_step_ - 1});
  } else {
    parts_.feed.channel->release(*current_);
  }
  current_.reset();
  device_batch_.reset();
}

void BatchStream::release_returned(bool closing) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->lease.expired()) {
      parts_.feed.channel->release(it->received);
      it = held_.erase(it);
    } else if (closing) {
      // Still referenced as the feed ends: not given back (no batch may be written into it), and
      // the channel leaves its slots allocated, so the tensors stay readable.
      parts_.feed.channel->keep_slots_alive();
      log::get("runtime")->info("model {}: tensors of global step {} are still referenced at feed.close(): the feed's "
                                "receive slots stay allocated until the process ends",
                                parts_.session.describe(parts_.session.rank()), it->global_step);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

// The script holds every slot: no batch can arrive until it frees one, so say so now instead of
// waiting out runtime.timeout_s.
void BatchStream::check_slots_left() const {
  if (held_.empty() || static_cast<int>(held_.size()) < parts_.settings.credits) return;
  std::string steps;
  for (const HeldSlot& slot : held_) steps += (steps.empty() ? "" : ", ") + std::to_string(slot.global_step);
  throw ConfigError("model " + parts_.session.describe(parts_.session.rank()) + " holds tensors of every one of its " +
                    std::to_string(parts_.settings.credits) + " receive slots (global steps " + steps +
                    "), so no further batch can arrive: .clone() the tensors you keep past a step (or del them), or "
                    "raise train.credits");
}

// The script's step ends where it asks for the next batch. Its time not inside a span it marked
// is its own work as well (anything between its spans: a slow data augmentation, a sleep, a
// host-side .item()): recorded as forward, the stage that never waits on a peer, so that a rank
// slow outside its marked spans stays the slowest in the report's straggler rule, instead of
// only its DDP peers' backward (where they wait for it inside the gradient all-reduce) growing.
void BatchStream::end_step_span() {
  if (!span_open_) return;
  span_open_ = false;
  const int64_t end_ns = timing::now_ns();
  tally_.add_compute(static_cast<double>(end_ns - step_start_ns_) * 1e-9);
  record_unmarked(end_ns);
}

void BatchStream::record_unmarked(int64_t until_ns) {
  // Gaps shorter than this are the script's loop overhead between spans: not worth a span each.
  constexpr int64_t min_gap_ns = 200000;
  if (until_ns - marked_until_ns_ < (step_marked_ ? min_gap_ns : 1)) return;
  timing::Span span;
  span.stage = timing::Stage::forward;
  span.start_ns = marked_until_ns_;
  span.end_ns = until_ns;
  span.step = next_step_ - 1;
  timing::SpanRecorder::global().record(span);
  marked_until_ns_ = until_ns;
}

// The stop agreement after step next_step_ - 1 (STOP AGREEMENT in the header): one all-reduce
// of {stop signal, non-finite training loss, validation loss x samples, validation samples}.
void BatchStream::agree(double loss) {
  const int64_t step = next_step_ - 1;
  // The validation sums ride along (every model rank has the same caches and languages).
  std::vector<float> flags = {stop_requested() || data_rank_stop_ ? 1.0f : 0.0f, std::isfinite(loss) ? 0.0f : 1.0f};
  const std::vector<float> validation = validation_tally_.flat();
  flags.insert(flags.end(), validation.begin(), validation.end());
  if (parts_.reducer != nullptr) {
    timing::ScopedSpan span(timing::Stage::sync, step);
    parts_.reducer->all_reduce_sum(flags.data(), flags.size());
  }
  if (flags[1] > 0) stop_on_nonfinite_loss("training", step, loss);
  if (flags[3] > 0) {
    const double mean = static_cast<double>(flags[2]) / static_cast<double>(flags[3]);
    if (!std::isfinite(mean)) stop_on_nonfinite_loss("validation", step, validation_tally_.mean());
    // No batch was handed out since the pass: it followed global step next_step_ - 1.
    json record = {{"global_step", next_step_}, {"loss", mean}};
    validation_tally_.describe(flags.data() + 2, record);
    validations_.push_back(std::move(record));
  }
  validation_tally_.clear();
  if (flags[0] > 0 && next_step_ < parts_.setup.end_step) {
    stopped_at_ = next_step_;
    parts_.context.stopped = true;
  }
}

// Names the step and the model ranks whose loss was inf or NaN (a second all-reduce, one float
// per model rank, which every model rank makes at the same step) and throws. The newest
// checkpoint is named: no checkpoint is written from here on.
void BatchStream::stop_on_nonfinite_loss(const char* what, int64_t global_step, double loss) {
  std::vector<float> nonfinite(parts_.setup.model_ranks.size(), 0.0f);
  nonfinite[static_cast<size_t>(model_index_)] = std::isfinite(loss) ? 0.0f : 1.0f;
  if (parts_.reducer != nullptr) parts_.reducer->all_reduce_sum(nonfinite.data(), nonfinite.size());
  std::string ranks;
  for (size_t i = 0; i < nonfinite.size(); ++i) {
    if (nonfinite[i] > 0) ranks += (ranks.empty() ? "" : ", ") + parts_.session.describe(parts_.setup.model_ranks[i]);
  }
  const PlanPosition at = parts_.setup.schedule->position(global_step);
  const std::string here = std::isfinite(loss) ? "" : std::isnan(loss) ? " (nan here)" : " (inf here)";
  // Its weights are finite (the trainer checks) but gave this loss: it may be too far gone.
  const std::string newest =
      newest_checkpoint_.empty()
          ? "resume from the script's newest checkpoint before it"
          : "the newest, " + newest_checkpoint_ +
                ", holds the last finite state (resume from an older one if it diverges again)";
  throw Error(ErrorKind::internal,
              "the " + std::string(what) + " loss is not finite at global step " + std::to_string(global_step) +
                  " (epoch " + std::to_string(at.epoch) + " step " + std::to_string(at.step) + ") on model " + ranks +
                  here + ": training diverged (optim.lr too high? optim.grad_clip off?) or the batch holds "
                  "non-finite features. Stopped without writing a checkpoint; " + newest +
                  ". Fix the cause, then --resume");
}

void BatchStream::start_validation() {
  if (closed_) throw TransportError("validation asked of a closed feed (after close() or a failure)");
  end_step_span();  // the step's compute ends where its validation begins
  if (!validation_assembler_) {
    validation_assembler_ = std::make_unique<BatchAssembler>(parts_.reader);
    model::FeatureTransformSettings features = parts_.context.features;
    features.masking = {};  // validation batches are normalised, never masked
    validation_normalizer_ = std::make_unique<model::FeatureTransform>(std::move(features), "cpu");
  }
  validation_next_ = 0;
  validation_start_ns_ = timing::now_ns();
}

std::optional<StreamBatch> BatchStream::next_validation() {
  if (validation_start_ns_ < 0) start_validation();
  validation_batch_size_ = 0;
  if (validation_next_ >= validation_indices_.size()) return std::nullopt;
  const size_t per_batch = static_cast<size_t>(std::max(1, parts_.settings.plan.batch_size));
  size_t end = std::min(validation_indices_.size(), validation_next_ + per_batch);
  // Within one cache and one language (the constructor ordered them so, each one's together).
  const int64_t first = validation_indices_[validation_next_];
  validation_corpus_ = parts_.reader.corpus_of(first);
  validation_language_ = parts_.reader.entry(first).language;
  const auto other = [&](int64_t index) {
    return parts_.reader.corpus_of(index) != validation_corpus_ || parts_.reader.entry(index).language != validation_language_;
  };
  while (end > validation_next_ + 1 && other(validation_indices_[end - 1])) --end;
  const std::vector<int64_t> indices(validation_indices_.begin() + static_cast<ptrdiff_t>(validation_next_),
                                     validation_indices_.begin() + static_cast<ptrdiff_t>(end));
  validation_next_ = end;
  validation_batch_size_ = static_cast<int64_t>(indices.size());
  // A kept tensor of the last validation batch holds its bytes: this batch gets new ones.
  validation_lease_.reset();
  if (!validation_bytes_ || validation_bytes_.use_count() > 1) validation_bytes_ = std::make_shared<BatchBytes>();
  validation_assembler_->assemble_unplanned(indices, *validation_bytes_);
  if (spans_ == StepSpans::script) validation_lease_ = validation_bytes_;
  StreamBatch batch;
  batch.host = BatchPointers::of(validation_bytes_->data(), validation_bytes_->size());
  validation_normalizer_->apply(mel_batch_of(batch.host, const_cast<float*>(batch.host.mels)), -1, false);
  batch.global_step = last_step();
  batch.epoch = batch.step = -1;
  return batch;
}

void BatchStream::end_validation() {
  if (validation_start_ns_ < 0) return;
  timing::Span span;
  span.stage = timing::Stage::validation;
  span.start_ns = validation_start_ns_;
  span.end_ns = timing::now_ns();
  span.step = last_step();
  timing::SpanRecorder::global().record(span);
  validation_start_ns_ = -1;
  parts_.context.finish->still_working();
}

bool BatchStream::validation_due(int64_t done) const {
  const int64_t every = parts_.settings.validation_every;
  return every > 0 && done % every == 0 && done != parts_.setup.end_step;
}

void BatchStream::mark(timing::Stage stage, int64_t start_ns, int64_t end_ns) {
  using timing::Stage;
  static constexpr Stage model_stages[] = {Stage::forward,  Stage::backward,   Stage::allreduce_exposed,
                                           Stage::optimizer, Stage::sync,      Stage::validation,
                                           Stage::checkpoint};
  if (std::find(std::begin(model_stages), std::end(model_stages), stage) == std::end(model_stages)) {
    throw ConfigError("feed.span(\"" + std::string(timing::to_string(stage)) +
                      "\"): a model rank's spans are forward, backward, allreduce_exposed, optimizer, sync, "
                      "validation or checkpoint");
  }
  timing::Span span;
  span.stage = stage;
  span.start_ns = start_ns;
  span.end_ns = std::max(start_ns, end_ns);
  span.step = last_step();
  if (span_open_) {
    step_marked_ = true;
    record_unmarked(std::min(start_ns, span.end_ns));  // the script's time before this span
    marked_until_ns_ = std::max(marked_until_ns_, span.end_ns);
  }
  timing::SpanRecorder::global().record(span);
}

// Says whom this rank waited for when the wait fails, in the run's terms: the data rank and the
// global step.
std::optional<transport::ReceivedBatch> BatchStream::receive() {
  const MpiSession& session = parts_.session;
  const int data_rank = parts_.feed.data_rank;
  parts_.context.waiting_for = data_rank;
  std::optional<transport::ReceivedBatch> received;
  try {
    const ProgressWatchdog::PeerWait waiting_on_data_rank({data_rank}, "its batch from its data rank");
    received = parts_.feed.channel->receive();
  } catch (const TransportError& error) {
    closed_ = true;
    throw error.carry_marks_to(TransportError("model " + session.describe(session.rank()) + " waiting for global step " +
                                              std::to_string(next_step_) + " from its data " +
                                              session.describe(data_rank) + ": " + error.what()));
  }
  if (!received) {
    closed_ = true;
    throw TransportError("the feed from " + session.describe(data_rank) + " ended at global step " +
                         std::to_string(next_step_) + " of " + std::to_string(parts_.setup.end_step));
  }
  parts_.context.waiting_for = -1;
  return received;
}

void BatchStream::check_position(const BatchPointers& batch) const {
  const PlanPosition expected = parts_.setup.schedule->position(next_step_);
  if (batch.header->epoch != expected.epoch || batch.header->step != expected.step) {
    throw TransportError("received epoch " + std::to_string(batch.header->epoch) + " step " +
                         std::to_string(batch.header->step) + " from " + parts_.session.describe(parts_.feed.data_rank) +
                         ", expected epoch " + std::to_string(expected.epoch) + " step " +
                         std::to_string(expected.step) + ": data and model ranks disagree on the plan");
  }
}

void BatchStream::post_status() {
  StatusBoard* board = parts_.context.status;
  if (board == nullptr || !board->due()) return;
  board->post(tally_.take_status(to_string(parts_.setup.roles.at(parts_.session.rank()).role), next_step_,
                                 parts_.setup.end_step));
}

void BatchStream::close() {
  if (closed_) return;
  end_validation();
  end_step_span();
  closed_ = true;
  said_held_ = true;  // a batch still referenced now is said by release_returned
  release_slot();
  release_returned(true);
  validation_lease_.reset();
  // Stopped early: the data rank is told to stop sending (its send fails, naming this rank).
  if (next_step_ < parts_.setup.end_step && parts_.feed.channel != nullptr) parts_.feed.channel->close();
}

json BatchStream::summary() const {
  const double elapsed = seconds_since(started_);
  return {{"rank", parts_.session.rank()},
          {"role", "model"},
          {"kind", "python"},
          {"steps", next_step_ - parts_.setup.first_step},
          {"planned_steps", parts_.setup.end_step - parts_.setup.first_step},
          {"first_step", parts_.setup.first_step},
          {"wall_seconds", elapsed},
          {"input_wait_seconds", tally_.wait_s()},
          {"compute_seconds", tally_.compute_s()},
          {"samples", tally_.samples()},
          {"frames", tally_.frames()},
          {"replay_from_memory", false},
          {"stopped_at", stopped_at_},
          {"validation", validations_}};
}

}  // namespace sluice::runtime
