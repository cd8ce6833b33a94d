#include "runtime/train/plan_schedule.h"

#include "common/error.h"

namespace sluice::runtime {

PlanSchedule::PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks)
    : train_(std::move(train)), config_(std::move(config)), model_ranks_(model_ranks) {
  auto first = std::make_shared<const BatchPlan>(BatchPlan::build(train_, config_, model_ranks_, 0));
  steps_per_epoch_ = first->steps();
  fingerprint_ = first->fingerprint();
  anchor_steps_ = steps_per_epoch_;
  recent_.push_back(std::move(first));
}

std::shared_ptr<const BatchPlan> PlanSchedule::epoch(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& plan : recent_) {
    if (plan->epoch() == epoch) return plan;
  }
  const bool rest = epoch == anchor_epoch_ && !anchor_earlier_.empty();
  auto plan = std::make_shared<const BatchPlan>(
      rest ? BatchPlan::build_rest(train_, config_, model_ranks_, epoch, anchor_earlier_)
           : BatchPlan::build(train_, config_, model_ranks_, epoch));
  // Workers run at most a few batches ahead, so two or three epochs are ever in use at once.
  if (recent_.size() >= 4) recent_.erase(recent_.begin());
  recent_.push_back(plan);
  return plan;
}

PlanPosition PlanSchedule::position(int64_t global_step) const {
  const int64_t from_anchor = global_step - anchor_global_;
  if (from_anchor >= 0 && from_anchor < anchor_steps_) return {anchor_epoch_, from_anchor};
  if (from_anchor >= anchor_steps_) {
    const int64_t after = from_anchor - anchor_steps_;
    return {anchor_epoch_ + 1 + after / steps_per_epoch_, after % steps_per_epoch_};
  }
  // Before the anchor: whole epochs counted back from it.
  const int64_t back = -from_anchor - 1;  // 0 = the last step of the epoch before the anchor
  const PlanPosition at{anchor_epoch_ - 1 - back / steps_per_epoch_, steps_per_epoch_ - 1 - back % steps_per_epoch_};
  if (at.epoch < 0) {
    throw Error(ErrorKind::internal, "plan schedule: global step " + std::to_string(global_step) +
                                         " is before epoch 0 of this run's numbering");
  }
  return at;
}

int64_t PlanSchedule::epoch_start(int64_t epoch) const {
  if (epoch <= anchor_epoch_) return anchor_global_ - (anchor_epoch_ - epoch) * steps_per_epoch_;
  return anchor_global_ + anchor_steps_ + (epoch - anchor_epoch_ - 1) * steps_per_epoch_;
}

ScheduledBatch PlanSchedule::batch(int64_t global_step, int model_index) const {
  ScheduledBatch scheduled;
  scheduled.at = position(global_step);
  scheduled.plan = epoch(scheduled.at.epoch);
  scheduled.batch = &scheduled.plan->batch(scheduled.at.step, model_index);
  return scheduled;
}

PlanRecord PlanSchedule::record(int64_t global_step) const {
  PlanRecord record;
  record.global_step = global_step;
  record.at = position(global_step);
  record.fingerprint = fingerprint_;
  record.model_ranks = model_ranks_;
  if (record.at.epoch == anchor_epoch_) record.earlier = anchor_earlier_;
  return record;
}

bool PlanSchedule::resume(const PlanRecord& checkpoint) {
  const std::string& mine = fingerprint_;
  bool elastic = false;
  std::vector<EpochSegment> earlier = checkpoint.earlier;
  int64_t first_global = checkpoint.global_step - checkpoint.at.step;
  if (checkpoint.fingerprint != mine) {
    // Only the model-rank count may differ: the checkpoint's plan rebuilt with its count must match.
    if (checkpoint.model_ranks < 1 ||
        BatchPlan::fingerprint_of(train_, config_, checkpoint.model_ranks) != checkpoint.fingerprint) {
      throw ConfigError(
          "--resume: the batch plan differs from the checkpoint's in more than the number of model ranks (the "
          "cache, the training split or a train.* plan setting changed" +
          std::string(checkpoint.model_ranks < 1 ? ", or the checkpoint predates elastic resume" : "") +
          "); resume with the same cache and settings");
    }
    elastic = true;
    if (checkpoint.at.step > 0) earlier.push_back({checkpoint.model_ranks, checkpoint.at.step});
    first_global = checkpoint.global_step;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  anchor_epoch_ = checkpoint.at.epoch;
  anchor_global_ = first_global;
  anchor_earlier_ = std::move(earlier);
  recent_.clear();
  const auto anchor = std::make_shared<const BatchPlan>(
      anchor_earlier_.empty() ? BatchPlan::build(train_, config_, model_ranks_, anchor_epoch_)
                              : BatchPlan::build_rest(train_, config_, model_ranks_, anchor_epoch_, anchor_earlier_));
  anchor_steps_ = anchor->steps();
  if (!elastic && checkpoint.at.step > anchor_steps_) {
    throw ConfigError("--resume: the checkpoint is at step " + std::to_string(checkpoint.at.step) + " of epoch " +
                      std::to_string(checkpoint.at.epoch) + ", past the " + std::to_string(anchor_steps_) +
                      " steps of its plan; the checkpoint does not belong to this run");
  }
  recent_.push_back(anchor);
  return elastic;
}

}  // namespace sluice::runtime
