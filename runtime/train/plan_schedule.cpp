#include "runtime/train/plan_schedule.h"

namespace sluice::runtime {

PlanSchedule::PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks)
    : train_(std::move(train)), config_(std::move(config)), model_ranks_(model_ranks) {
  auto first = std::make_shared<const BatchPlan>(BatchPlan::build(train_, config_, model_ranks_, 0));
  steps_per_epoch_ = first->steps();
  recent_.push_back(std::move(first));
}

std::shared_ptr<const BatchPlan> PlanSchedule::epoch(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& plan : recent_) {
    if (plan->epoch() == epoch) return plan;
  }
  auto plan = std::make_shared<const BatchPlan>(BatchPlan::build(train_, config_, model_ranks_, epoch));
  // Workers run at most a few batches ahead, so two or three epochs are ever in use at once.
  if (recent_.size() >= 4) recent_.erase(recent_.begin());
  recent_.push_back(plan);
  return plan;
}

PlanPosition PlanSchedule::position(int64_t global_step) const {
  return PlanPosition{global_step / steps_per_epoch_, global_step % steps_per_epoch_};
}

ScheduledBatch PlanSchedule::batch(int64_t global_step, int model_index) const {
  ScheduledBatch scheduled;
  scheduled.at = position(global_step);
  scheduled.plan = epoch(scheduled.at.epoch);
  scheduled.batch = &scheduled.plan->batch(scheduled.at.step, model_index);
  return scheduled;
}

}  // namespace sluice::runtime
