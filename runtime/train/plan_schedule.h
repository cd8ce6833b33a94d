#pragma once
// The batch plan across epochs: every epoch's plan (runtime/train/batch_plan.h) built on demand,
// and the global step <-> (epoch, step) arithmetic the data and model ranks share. Used by the
// feeder, the model loop, checkpoints and `sluice doctor`.
//
// Carrying. Epoch e's plan takes the samples epoch e - 1 deferred (fewer than model ranks); so a
// plan needs the one before it, built from the anchor forward (and kept for a few epochs).
//
// Numbering. The run is anchored at epoch 0's step 0 (fresh) or at its checkpoint (resume()):
// the anchor epoch starts at a known global step, may be the rest of an epoch begun with another
// model-rank count (BatchPlan::build_rest) and has the steps of its plan; each epoch after it has
// BatchPlan::whole_epoch(carried).steps, carried being what the epoch before defers, so the
// numbering is counted forward from the anchor without building the plans. Epochs before the
// anchor are not trained by this run; their steps are counted back with steps_per_epoch() each
// (only for labels). The global step is the optimiser's step count, so the learning-rate schedule
// goes on across an elastic resume.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/train/batch_plan.h"

namespace sluice::runtime {

// One model rank's batch of a global step: where it is in the plan and what it holds. `plan`
// keeps the epoch's plan (and so `batch`) alive.
struct ScheduledBatch {
  PlanPosition at;
  std::shared_ptr<const BatchPlan> plan;
  const PlannedBatch* batch = nullptr;

  const BucketShape& shape() const { return plan->buckets()[static_cast<size_t>(batch->bucket)]; }
};

// What a checkpoint records about the plan at a global step (checkpoints.h keeps it in
// latest.json): enough to rebuild the plan of the epoch in progress on any model-rank count.
struct PlanRecord {
  int64_t global_step = 0;
  PlanPosition at;                    // the next batch to train
  std::string fingerprint;            // BatchPlan::fingerprint() of the plan it followed
  int model_ranks = 0;                // 0: an older checkpoint that did not record it
  std::vector<EpochSegment> earlier;  // at.epoch's segments before this plan (elastic resume)
  int plan_version = 0;               // kBatchPlanVersion of the plan; 0: written before version 2
  std::vector<int64_t> carried;       // the samples carried into at.epoch (fewer than model ranks)
};

class PlanSchedule {
 public:
  // The batch plan of every epoch, built on demand (a plan is a pure function of its inputs).
  PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks);
  // Thread-safe (the feeder's reader threads share one schedule). An epoch before the anchor is
  // an internal error (this run never trains it).
  std::shared_ptr<const BatchPlan> epoch(int64_t epoch) const;
  // Epoch 0 of a fresh run: the buckets' shapes (the same in every epoch) for summaries and sizes.
  const BatchPlan& shapes() const { return *first_; }
  // Steps of a whole epoch with nothing carried in; an epoch has at most one more or fewer.
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int model_ranks() const { return model_ranks_; }
  // Global step g <-> position (epoch, step).
  PlanPosition position(int64_t global_step) const;
  // The global step of `epoch`'s step 0; epoch_start(E) is where the run of E epochs ends.
  int64_t epoch_start(int64_t epoch) const;
  // Samples the last of `epochs` epochs (from 0) defers: after a run of that many epochs they are
  // deferred past the run's end (trained first if the run is extended).
  int64_t deferred_after(int64_t epochs) const;
  // The batch of plan column `model_index` at `global_step`.
  ScheduledBatch batch(int64_t global_step, int model_index) const;
  const std::vector<PlanSample>& samples() const { return train_; }

  // The record a checkpoint at `global_step` keeps.
  PlanRecord record(int64_t global_step) const;
  // --resume: anchors the numbering at `checkpoint` (before any other call from another thread).
  // The same plan continues where it was; a plan that differs only in the number of model ranks
  // continues the epoch in progress with the samples it has not trained (elastic: returns true);
  // anything else (another cache, split or train.* plan setting, or a checkpoint of plan version
  // 1) is a ConfigError saying so.
  bool resume(const PlanRecord& checkpoint);

 private:
  std::shared_ptr<const BatchPlan> epoch_locked(int64_t epoch) const;
  const std::vector<int64_t>& carried_into_locked(int64_t epoch) const;
  // Extends starts_ and deferred_ until they cover `epoch` (epochs from the anchor).
  void count_through_locked(int64_t epoch) const;

  std::vector<PlanSample> train_;
  BatchPlanConfig config_;
  int model_ranks_;
  std::shared_ptr<const BatchPlan> first_;  // a fresh run's epoch 0
  int64_t steps_per_epoch_;
  std::string fingerprint_;  // every epoch's plan's
  // The anchor: anchor_epoch_ starts at global step anchor_global_, after `anchor_earlier_`,
  // with anchor_carried_ carried into it.
  int64_t anchor_epoch_ = 0;
  int64_t anchor_global_ = 0;
  std::vector<EpochSegment> anchor_earlier_;
  std::vector<int64_t> anchor_carried_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const BatchPlan>> recent_;  // a few epochs
  mutable std::map<int64_t, std::vector<int64_t>> carried_;       // into an epoch; a few epochs
  // Counted from the anchor: starts_[k] is epoch (anchor + k)'s first global step, deferred_[k]
  // what it defers (known once starts_[k + 1] is).
  mutable std::vector<int64_t> starts_;
  mutable std::vector<int64_t> deferred_;
};

}  // namespace sluice::runtime
