#pragma once
// The batch plan across epochs: every epoch's plan (runtime/train/batch_plan.h) built on demand,
// and the global step <-> (epoch, step) arithmetic the data and model ranks share. Used by the
// feeder, the model loop, checkpoints and `sluice doctor`.
//
// Numbering. A fresh run's epoch e covers global steps [e x S, (e + 1) x S), S = steps_per_epoch().
// A resumed run is anchored at its checkpoint (resume()): the epoch the checkpoint was in starts
// at a known global step and may be the rest of an epoch begun with another model-rank count
// (BatchPlan::build_rest), with its own number of steps; epochs after it have S steps each, and
// epochs before it are counted back from the anchor with S steps each. The global step is the
// optimiser's step count, so the learning-rate schedule goes on across an elastic resume.
#include <cstdint>
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
};

class PlanSchedule {
 public:
  // The batch plan of every epoch, built on demand (a plan is a pure function of its inputs).
  PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks);
  // Thread-safe (the feeder's reader threads share one schedule).
  std::shared_ptr<const BatchPlan> epoch(int64_t epoch) const;
  // Steps of a whole epoch (the anchor epoch of an elastic resume may have fewer).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int model_ranks() const { return model_ranks_; }
  // Global step g <-> position (epoch, step).
  PlanPosition position(int64_t global_step) const;
  // The global step of `epoch`'s step 0; epoch_start(E) is where the run of E epochs ends.
  int64_t epoch_start(int64_t epoch) const;
  // The batch of plan column `model_index` at `global_step`.
  ScheduledBatch batch(int64_t global_step, int model_index) const;
  const std::vector<PlanSample>& samples() const { return train_; }

  // The record a checkpoint at `global_step` keeps.
  PlanRecord record(int64_t global_step) const;
  // --resume: anchors the numbering at `checkpoint` (before any other call from another thread).
  // The same plan continues where it was; a plan that differs only in the number of model ranks
  // continues the epoch in progress with the samples it has not trained (elastic: returns true);
  // anything else (another cache, split or train.* plan setting) is a ConfigError saying so.
  bool resume(const PlanRecord& checkpoint);

 private:
  std::vector<PlanSample> train_;
  BatchPlanConfig config_;
  int model_ranks_;
  int64_t steps_per_epoch_;
  std::string fingerprint_;  // every epoch's plan's
  // The anchor: anchor_epoch_ starts at global step anchor_global_, after `anchor_earlier_`.
  int64_t anchor_epoch_ = 0;
  int64_t anchor_global_ = 0;
  int64_t anchor_steps_ = 0;  // steps of the anchor epoch's plan
  std::vector<EpochSegment> anchor_earlier_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const BatchPlan>> recent_;  // a few epochs
};

}  // namespace sluice::runtime
