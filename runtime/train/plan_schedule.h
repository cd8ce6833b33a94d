#pragma once
// The batch plan across epochs: every epoch's plan (runtime/train/batch_plan.h) built on demand,
// and the global step <-> (epoch, step) arithmetic the data and model ranks share. Used by the
// feeder, the model loop, checkpoints and `sluice doctor`.
#include <cstdint>
#include <memory>
#include <mutex>
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

class PlanSchedule {
 public:
  // The batch plan of every epoch, built on demand (a plan is a pure function of its inputs).
  PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks);
  // Thread-safe (the feeder's reader threads share one schedule).
  std::shared_ptr<const BatchPlan> epoch(int64_t epoch) const;
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Global step g <-> position (epoch, step).
  PlanPosition position(int64_t global_step) const;
  // The batch of plan column `model_index` at `global_step`.
  ScheduledBatch batch(int64_t global_step, int model_index) const;
  const std::vector<PlanSample>& samples() const { return train_; }

 private:
  std::vector<PlanSample> train_;
  BatchPlanConfig config_;
  int model_ranks_;
  int64_t steps_per_epoch_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const BatchPlan>> recent_;  // a few epochs
};

}  // namespace sluice::runtime
