#pragma once
// A model rank's batches, one step at a time: the one model side of the protocol between data
// and model ranks. sluice's C++ model loop (model_loop.cpp) and a Python training script
// (python/, docs/python.md) both train over it, so a model rank behaves the same whichever kind
// it is: the same receive with its named errors, plan check, batch_wait span, live status, stop
// agreement and validation batches.
//
// A STEP is what happens between handing a batch out (next()) and end_step(): the model's work
// on it. The C++ loop calls end_step(loss) itself, before it logs, validates or checkpoints; a
// Python step ends where the script asks for the next batch (next() ends an open step, with the
// loss the script reported through report_loss(), if any).
//
// BUFFER LIFETIME. A batch points into its receive slot (host memory, or the rank's GPU on a GPU
// transport). With StepSpans::own (the C++ loop) it stays valid until end_step(), which gives the
// slot and its credit back to the data rank. Without a channel (train.replay_from_memory, C++
// model ranks only) the batches are collated once per bucket on this rank (replay_batches.h).
//
// LEASES (StepSpans::script: a Python rank). What a script made from a batch (its tensors) may
// outlive the step, so a slot goes back only when both the step ended and nothing made from it
// is left: lease() is a token for the batch handed out last, which the stream holds until
// end_step() and each tensor made from the batch holds until it is freed (python/: DLPack's
// deleter drops it, on any thread). A slot whose lease is still held at end_step() stays out
// (said once per run in the log: it costs the data rank's read-ahead) and is given back by a later
// next() or close() once its lease is gone; slots go back in any order (feed_channel.h). When the
// script holds every slot (train.credits) next() raises ConfigError naming the steps held instead
// of waiting for a batch that cannot come. A validation batch's bytes are owned by its lease, so a
// kept validation tensor never shows the next validation batch either. At close() a slot whose
// tensors are still held is named in the log, and the channel keeps its slots allocated past its
// end (ReceiveChannel::keep_slots_alive), so such a tensor stays readable until the process ends.
//
// STOP AGREEMENT (once per step, in end_step). The model ranks agree, with one all-reduce of four
// floats over their communicator, on every reason to stop:
//   - a stop signal: SIGTERM or SIGUSR1 on any model rank (common/stop_signal.h), or a batch whose
//     data rank got one (BatchHeader::data_rank_stop). The run stops after this step on every
//     model rank: next() returns nullopt, stopped_at() says where, and close() tells the data rank
//     to stop sending (its send fails on a closed channel, which it takes as the stop). The C++
//     loop checkpoints there; a script checkpoints and resumes with resume_step = stopped_at().
//   - a non-finite training loss on any model rank (the loss given to end_step or report_loss);
//   - a non-finite validation loss reported since the last agreement (report_loss during a
//     validation pass; the C++ loop checks its own all-reduced validation mean, the same way).
// Either non-finite loss ends the run on every model rank at this step with one error naming the
// step and the model ranks that saw it (stop_on_nonfinite_loss), before anything is logged or
// checkpointed from the diverged state. Every model rank makes the agreement after the same
// steps; it waits while the other model ranks are alive and names one that went silent
// (mpi_gradient_reducer.h).
//
// VALIDATION. This rank's share of the validation split (every model_ranks-th sample, starting
// at its model index), in batches of train.batch_size assembled from the cache on this rank and
// normalised as training batches are, never masked. validation_due(done) says whether
// train.validation_every asks for a pass after `done` steps. A validation batch lives in the
// stream's own buffer (host memory), valid until the next next_validation() or close(); the
// training batch stays valid meanwhile. A script's reported validation losses (report_loss
// during the pass) are averaged over the model ranks in the next agreement and recorded in this
// rank's summary, as the C++ loop records its own.
//
// TIMING. With StepSpans::script (a Python rank) the stream records the step's time outside the
// spans the script marked (mark()) as `forward` (the whole step when it marks none; gaps of 0.2
// ms or more between marks), so that the report sees compute and input wait as for a C++ rank;
// debug.delay_stage=forward delays the start of each step. With StepSpans::own (the C++ loop) the
// caller records its phases itself and adds their time with add_compute().
//
// THREADING. One thread calls every method (the channel's MPI calls are made on it).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "model/feature_transform.h"
#include "runtime/train/batch_assembler.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/model_side.h"
#include "runtime/train/step_tally.h"
#include "runtime/train/validation_tally.h"
#include "runtime/transport/feed_channel.h"
#include "timing/stage.h"

namespace sluice::runtime {

class ReplayBatches;

struct StreamBatch {
  int64_t global_step = 0;
  int64_t epoch = 0;
  int64_t step = 0;       // within the epoch
  BatchPointers host{};   // on a GPU transport: header, indices and lengths only
  BatchPointers device{}; // in device memory: every section on the GPU; null pointers on the host
  int gpu = -1;           // the GPU holding `device`; -1: the batch is in host memory

  bool on_device() const { return device.header != nullptr; }
  DeviceBatch device_batch() const { return DeviceBatch{{}, host, device}; }
};

// Who records a step's spans (TIMING above).
enum class StepSpans { script, own };

class BatchStream {
 public:
  // `parts` (and what it refers to) must outlive the stream. `replay_gpu`: the GPU a replayed
  // batch is uploaded to (-1: host memory), for a stream without a channel.
  BatchStream(const ModelRankParts& parts, StepSpans spans, int replay_gpu = -1);
  ~BatchStream();

  // The next planned batch of this rank, or nullopt after the run's last step or a stop. Ends an
  // open step first (end_step with the reported loss). Blocks while the data rank is alive;
  // throws TransportError naming it when it is silent for runtime.timeout_s or the feed fails.
  std::optional<StreamBatch> next();
  // Ends the step of the batch handed out last: gives its slot back, then the stop agreement
  // (STOP AGREEMENT above) with `loss`, this rank's training loss of the step (nullopt: none
  // reported). Throws the non-finite loss error. Nothing happens without an open step.
  void end_step(std::optional<double> loss);
  // A loss the script computed: the step's training loss, or, during a validation pass, the mean
  // loss of the validation batch handed out last. Only its finiteness and, for validation, its
  // value are used (STOP AGREEMENT).
  void report_loss(double loss);
  // The C++ loop's time computing the step (StepSpans::own).
  void add_compute(double seconds) { tally_.add_compute(seconds); }
  // The lease of the batch handed out last by next() (or next_validation()): see LEASES. Empty
  // with StepSpans::own.
  std::weak_ptr<const void> lease() const { return lease_; }
  std::weak_ptr<const void> validation_lease() const { return validation_lease_; }
  // What the non-finite loss error says to resume from: "step-N.pt (global step N)", the newest
  // checkpoint of the run (the C++ loop's); empty: the script's own.
  void set_newest_checkpoint(std::string name) { newest_checkpoint_ = std::move(name); }
  // Throws the non-finite loss error on every model rank, naming those whose `loss` is not
  // finite (a second all-reduce, which every model rank makes at the same point). `what` is
  // "training" or "validation".
  [[noreturn]] void stop_on_nonfinite_loss(const char* what, int64_t global_step, double loss);

  // A span the script marked in its current step (forward, backward, optimizer, ...), in
  // timing::now_ns() time. Throws ConfigError for a stage that is not a model rank's.
  void mark(timing::Stage stage, int64_t start_ns, int64_t end_ns);
  // Starts a pass over this rank's share of the validation split: ends the current step's compute
  // span (the pass is a validation span of its own, recorded by end_validation()).
  void start_validation();
  // The pass's next batch (epoch, step -1; host memory), or nullopt at its end.
  std::optional<StreamBatch> next_validation();
  // Records the pass as one validation span.
  void end_validation();
  // Whether train.validation_every asks for validation after `done` global steps (and the end of
  // a finished run validates once more).
  bool validation_due(int64_t done) const;
  size_t validation_samples() const { return validation_indices_.size(); }
  // A validation batch never mixes caches or languages, so its loss is one corpus's and one
  // language's: the corpus (0 for one cache) and the language (CacheReader::languages()) of the
  // batch handed out last. A pass's record ("validation" of the rank's stats) then has each
  // corpus's and each language's mean loss (validation_tally.h).
  size_t validation_corpus() const { return validation_corpus_; }
  size_t validation_language() const { return validation_language_; }
  size_t corpora() const { return parts_.reader.corpora(); }
  // An empty tally of this run's caches and languages.
  ValidationTally make_validation_tally() const;

  // Ends the stream: gives the current slot back and, when the run did not reach its end, shuts
  // the channel (the data rank stops sending). Makes no agreement. Idempotent.
  void close();

  int64_t first_step() const { return parts_.setup.first_step; }
  int64_t end_step() const { return parts_.setup.end_step; }
  int model_index() const { return model_index_; }
  int64_t done() const { return next_step_ - parts_.setup.first_step; }  // batches handed out
  // The global step a stop signal ended the run at (the first batch not handed out); -1: none.
  int64_t stopped_at() const { return stopped_at_; }
  bool stopped() const { return stopped_at_ >= 0; }
  const StepTally& tally() const { return tally_; }
  // This rank's stats for ranks/rank-N.json, as a Python rank reports them (the C++ loop adds
  // its own).
  nlohmann::json summary() const;

 private:
  // The global step of the batch handed out last (the first step before any): where the spans
  // and validation passes of the script's current step belong.
  int64_t last_step() const { return std::max(parts_.setup.first_step, next_step_ - 1); }
  void end_step_span();
  // Records the open step's time from the end of its last marked span to `until_ns` as forward.
  void record_unmarked(int64_t until_ns);
  void agree(double loss);
  BatchPointers receive_or_replay(StreamBatch& batch);
  std::optional<transport::ReceivedBatch> receive();
  void check_position(const BatchPointers& batch) const;
  void post_status();
  void release_slot();
  // Gives back the held slots whose leases are gone; `closing`: keeps the others allocated past
  // the channel's end instead (close()).
  void release_returned(bool closing);
  void check_slots_left() const;

  const ModelRankParts parts_;
  const StepSpans spans_;
  const int model_index_;
  int64_t next_step_;  // the global step of the next batch
  std::unique_ptr<ReplayBatches> replay_;
  std::optional<transport::ReceivedBatch> current_;
  std::optional<DeviceBatch> device_batch_;  // a batch that arrived on the GPU (its host copy of the header)
  std::shared_ptr<const void> lease_;        // the current batch's (LEASES); held by the stream until end_step
  // Slots out past their step because the script still holds their tensors (LEASES).
  struct HeldSlot {
    transport::ReceivedBatch received;
    std::optional<DeviceBatch> device_batch;
    std::weak_ptr<const void> lease;
    int64_t global_step = 0;
  };
  std::vector<HeldSlot> held_;
  bool said_held_ = false;  // the log said once that a slot stays out past its step
  bool step_open_ = false;   // a batch is out and its step not ended (end_step)
  bool span_open_ = false;   // StepSpans::script: the step's compute span, until validation or end_step
  bool step_marked_ = false;
  int64_t step_start_ns_ = 0;
  int64_t marked_until_ns_ = 0;  // the open step is covered by spans up to here
  std::optional<double> reported_loss_;  // the script's loss of the open step
  bool closed_ = false;
  int64_t stopped_at_ = -1;
  bool data_rank_stop_ = false;  // a batch said its data rank got a stop signal
  std::string newest_checkpoint_;
  // Validation: this rank's sample indices, the pass's position and its batch's bytes.
  std::vector<int64_t> validation_indices_;
  size_t validation_next_ = 0;
  int64_t validation_start_ns_ = -1;
  int64_t validation_batch_size_ = 0;  // of the batch handed out last
  size_t validation_corpus_ = 0;
  size_t validation_language_ = 0;
  ValidationTally validation_tally_;  // the script's reported losses since the last agreement
  std::unique_ptr<BatchAssembler> validation_assembler_;
  std::unique_ptr<model::FeatureTransform> validation_normalizer_;
  // The validation batch's bytes, owned by its lease (LEASES): a new buffer when a kept tensor
  // still holds the last one.
  std::shared_ptr<BatchBytes> validation_bytes_;
  std::shared_ptr<const void> validation_lease_;
  nlohmann::json validations_ = nlohmann::json::array();  // {global_step, loss} of reported passes
  Clock::time_point started_;
  StepTally tally_;  // totals, and the live status's interval since the last post
};

}  // namespace sluice::runtime
