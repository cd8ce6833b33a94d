#pragma once
// A model rank's batches pulled one at a time: the model side of a rank whose training runs
// outside sluice's C++ model loop (a Python training script, python/ and docs/python.md).
//
// Around each batch it does what the C++ loop (model_loop.h) does: the batch_wait span (its data
// rank, sequence and bytes), the check of the batch's (epoch, step) against the plan, a sign of
// life for the finish line and the live status. The time from handing a batch out to the next
// call of next() is the script's step: the spans it marks (mark()), and its time outside them as
// `forward` (the whole step when it marks none; gaps of 0.2 ms or more between marks), so that
// the report sees compute and input wait as for a C++ rank. debug.delay_stage=forward delays the
// start of this rank's steps.
//
// BUFFER LIFETIME. A batch points into its receive slot (host memory, or the rank's GPU on a GPU
// transport) and stays valid until the next call of next() or close(), which give the slot and
// its credit back to the data rank. Only one batch is out at a time.
//
// STOP (preemption, as the C++ loop's agree_to_stop in model_loop.cpp). Before each batch the
// model ranks agree, with one all-reduce over their communicator, whether any of them got
// SIGTERM or SIGUSR1 (common/stop_signal.h), or received a batch whose data rank got one
// (BatchHeader::data_rank_stop); when one did, next() returns nullopt on every model rank at the
// same global step, stopped_at() says which, and close() tells the data rank to stop sending
// (its send fails on a closed channel, which it takes as the stop). The script checkpoints and
// resumes with resume_step = stopped_at().
//
// VALIDATION (as the C++ loop's mean_validation_loss). This rank's share of the validation split
// (every model_ranks-th sample, starting at its model index), in batches of train.batch_size
// assembled from the cache on this rank and normalised as training batches are, never masked.
// validation_due(done) says whether train.validation_every asks for a pass after `done` steps.
// A validation batch lives in the stream's own buffer (host memory), valid until the next
// next_validation() or close(); the training batch stays valid meanwhile.
//
// THREADING. One thread calls next(), mark(), the validation calls and close() (it makes the
// channel's MPI calls).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "model/feature_transform.h"
#include "runtime/train/batch_assembler.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/model_side.h"
#include "runtime/train/step_tally.h"
#include "runtime/transport/feed_channel.h"
#include "timing/stage.h"

namespace sluice::runtime {

struct StreamBatch {
  int64_t global_step = 0;
  int64_t epoch = 0;
  int64_t step = 0;       // within the epoch
  BatchPointers host{};   // on a GPU transport: header, indices and lengths only
  BatchPointers device{}; // on a GPU transport: every section on the GPU; null pointers on the host
  int gpu = -1;           // the GPU holding `device`; -1: the batch is in host memory
};

class BatchStream {
 public:
  // `parts` (and what it refers to) must outlive the stream.
  explicit BatchStream(const ModelRankParts& parts);
  ~BatchStream();

  // The next planned batch of this rank, or nullopt after the run's last step. Gives the previous
  // batch's slot back first. Blocks while the data rank is alive; throws TransportError naming
  // it (as the C++ loop does) when it is silent for runtime.timeout_s or the feed fails.
  std::optional<StreamBatch> next();
  // A span the script marked in its current step (forward, backward, optimizer, ...), in
  // timing::now_ns() time. Throws ConfigError for a stage that is not a model rank's.
  void mark(timing::Stage stage, int64_t start_ns, int64_t end_ns);
  // Starts a pass over this rank's share of the validation split: ends the current step's compute
  // span (the pass is a validation span of its own, recorded by end_validation()).
  void start_validation();
  // The pass's next batch (epoch, step -1; host memory), or nullopt at its end.
  std::optional<StreamBatch> next_validation();
  // Records the pass as one validation span; called by the script's side after the last batch.
  void end_validation();
  // Whether train.validation_every asks for validation after `done` global steps (the C++ loop
  // validates then, and once more at the end of a finished run).
  bool validation_due(int64_t done) const;
  size_t validation_samples() const { return validation_indices_.size(); }

  // Ends the stream: gives the current slot back and, when the run did not reach its end, shuts
  // the channel (the data rank stops sending). Idempotent.
  void close();

  int64_t first_step() const { return parts_.setup.first_step; }
  int64_t end_step() const { return parts_.setup.end_step; }
  int model_index() const { return model_index_; }
  int64_t done() const { return next_step_ - parts_.setup.first_step; }  // batches handed out
  // The global step a stop signal ended the run at (the first batch not handed out); -1: none.
  int64_t stopped_at() const { return stopped_at_; }
  // This rank's stats for ranks/rank-N.json (the C++ loop's fields that apply).
  nlohmann::json summary() const;

 private:
  void end_step_span();
  // Records the open step's time from the end of its last marked span to `until_ns` as forward.
  void record_unmarked(int64_t until_ns);
  bool agree_to_stop();
  std::optional<transport::ReceivedBatch> receive();
  void check_position(const BatchPointers& batch) const;
  void post_status();

  const ModelRankParts parts_;
  const int model_index_;
  int64_t next_step_;  // the global step of the next batch
  std::optional<transport::ReceivedBatch> current_;
  std::optional<DeviceBatch> device_batch_;  // a batch that arrived on the GPU (its host copy of the header)
  bool step_open_ = false;
  bool step_marked_ = false;
  int64_t step_start_ns_ = 0;
  int64_t marked_until_ns_ = 0;  // the open step is covered by spans up to here
  bool closed_ = false;
  int64_t stopped_at_ = -1;
  bool data_rank_stop_ = false;  // a batch said its data rank got a stop signal
  // Validation: this rank's sample indices, the pass's position and its batch's bytes.
  std::vector<int64_t> validation_indices_;
  size_t validation_next_ = 0;
  int64_t validation_start_ns_ = -1;
  std::unique_ptr<BatchAssembler> validation_assembler_;
  std::unique_ptr<model::FeatureTransform> validation_normalizer_;
  BatchBytes validation_bytes_;
  Clock::time_point started_;
  StepTally tally_;  // totals, and the live status's interval since the last post
};

}  // namespace sluice::runtime
