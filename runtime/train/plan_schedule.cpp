#include "runtime/train/plan_schedule.h"

#include <algorithm>

#include "common/error.h"

namespace sluice::runtime {

namespace {

constexpr size_t kPlansKept = 4;    // workers run a few batches ahead: two or three epochs in use at once
constexpr size_t kCarriedKept = 8;  // carried lists (fewer than model ranks each) of recent epochs

}  // namespace

PlanSchedule::PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks)
    : train_(std::move(train)), config_(std::move(config)), model_ranks_(model_ranks) {
  first_ = std::make_shared<const BatchPlan>(BatchPlan::build(train_, config_, model_ranks_, 0));
  steps_per_epoch_ = first_->whole_epoch(0).steps;
  fingerprint_ = first_->fingerprint();
  starts_ = {0, first_->steps()};
  deferred_ = {first_->deferred_samples()};
  carried_[1] = first_->deferred_indices();
  recent_.push_back(first_);
}

std::shared_ptr<const BatchPlan> PlanSchedule::epoch(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epoch_locked(epoch);
}

std::shared_ptr<const BatchPlan> PlanSchedule::epoch_locked(int64_t epoch) const {
  for (const auto& plan : recent_) {
    if (plan->epoch() == epoch) return plan;
  }
  if (epoch < anchor_epoch_) {
    throw Error(ErrorKind::internal, "plan schedule: epoch " + std::to_string(epoch) +
                                         " is before this run's first epoch " + std::to_string(anchor_epoch_));
  }
  const std::vector<int64_t> carried = carried_into_locked(epoch);
  const bool rest = epoch == anchor_epoch_ && !anchor_earlier_.empty();
  auto plan = std::make_shared<const BatchPlan>(
      rest ? BatchPlan::build_rest(train_, config_, model_ranks_, epoch, anchor_earlier_, carried)
           : BatchPlan::build(train_, config_, model_ranks_, epoch, carried));
  if (recent_.size() >= kPlansKept) recent_.erase(recent_.begin());
  recent_.push_back(plan);
  carried_[epoch + 1] = plan->deferred_indices();
  while (carried_.size() > kCarriedKept) carried_.erase(carried_.begin());
  return plan;
}

const std::vector<int64_t>& PlanSchedule::carried_into_locked(int64_t epoch) const {
  if (epoch == anchor_epoch_) return anchor_carried_;
  auto known = carried_.find(epoch);
  if (known != carried_.end()) return known->second;
  // Builds forward from the latest epoch whose carried samples are known (at worst the anchor).
  int64_t from = anchor_epoch_;
  for (const auto& [e, samples] : carried_) {
    if (e < epoch && e > from) from = e;
  }
  for (int64_t e = from; e < epoch; ++e) epoch_locked(e);
  return carried_.at(epoch);
}

void PlanSchedule::count_through_locked(int64_t epoch) const {
  const auto k = static_cast<size_t>(epoch - anchor_epoch_);
  while (starts_.size() < k + 2) {
    const int64_t counted = anchor_epoch_ + static_cast<int64_t>(starts_.size()) - 1;
    const EpochCounts counts = first_->whole_epoch(deferred_.back(), counted);
    starts_.push_back(starts_.back() + counts.steps);
    deferred_.push_back(counts.deferred);
  }
}

PlanPosition PlanSchedule::position(int64_t global_step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (global_step >= anchor_global_) {
    while (starts_.back() <= global_step) count_through_locked(anchor_epoch_ + static_cast<int64_t>(starts_.size()) - 1);
    // The last epoch starting at or before the step (an empty rest of an epoch is skipped).
    const auto after = std::upper_bound(starts_.begin(), starts_.end(), global_step);
    const auto k = static_cast<int64_t>(after - starts_.begin()) - 1;
    return {anchor_epoch_ + k, global_step - starts_[static_cast<size_t>(k)]};
  }
  // Before the anchor: whole epochs counted back from it.
  const int64_t back = anchor_global_ - global_step - 1;  // 0 = the last step of the epoch before the anchor
  const PlanPosition at{anchor_epoch_ - 1 - back / steps_per_epoch_, steps_per_epoch_ - 1 - back % steps_per_epoch_};
  if (at.epoch < 0) {
    throw Error(ErrorKind::internal, "plan schedule: global step " + std::to_string(global_step) +
                                         " is before epoch 0 of this run's numbering");
  }
  return at;
}

int64_t PlanSchedule::epoch_start(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch <= anchor_epoch_) return anchor_global_ - (anchor_epoch_ - epoch) * steps_per_epoch_;
  count_through_locked(epoch);
  return starts_[static_cast<size_t>(epoch - anchor_epoch_)];
}

int64_t PlanSchedule::deferred_after(int64_t epochs) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t last = epochs - 1;
  if (last < anchor_epoch_) return 0;  // ended before this run began: nothing of this run's
  count_through_locked(last);
  return deferred_[static_cast<size_t>(last - anchor_epoch_)];
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
  record.plan_version = kBatchPlanVersion;
  std::lock_guard<std::mutex> lock(mutex_);
  if (record.at.epoch == anchor_epoch_) record.earlier = anchor_earlier_;
  if (record.at.epoch < anchor_epoch_) {
    throw Error(ErrorKind::internal, "plan schedule: a checkpoint at global step " + std::to_string(global_step) +
                                         " is before this run's first epoch");
  }
  record.carried = carried_into_locked(record.at.epoch);
  return record;
}

bool PlanSchedule::resume(const PlanRecord& checkpoint) {
  if (checkpoint.plan_version != kBatchPlanVersion) {
    throw ConfigError(
        "--resume: the checkpoint at global step " + std::to_string(checkpoint.global_step) +
        " follows batch plan version " + std::to_string(std::max(1, checkpoint.plan_version)) +
        " (which dropped each bucket's remainder); this sluice plans version " + std::to_string(kBatchPlanVersion) +
        " (the remainder is spilled and carried into the next epoch), so the checkpoint's position names other "
        "samples: finish this run with the sluice that started it, or start a new run in another --run-dir");
  }
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
  anchor_carried_ = checkpoint.carried;
  recent_.clear();
  carried_.clear();
  const auto anchor = std::make_shared<const BatchPlan>(
      anchor_earlier_.empty()
          ? BatchPlan::build(train_, config_, model_ranks_, anchor_epoch_, anchor_carried_)
          : BatchPlan::build_rest(train_, config_, model_ranks_, anchor_epoch_, anchor_earlier_, anchor_carried_));
  if (!elastic && checkpoint.at.step > anchor->steps()) {
    throw ConfigError("--resume: the checkpoint is at step " + std::to_string(checkpoint.at.step) + " of epoch " +
                      std::to_string(checkpoint.at.epoch) + ", past the " + std::to_string(anchor->steps()) +
                      " steps of its plan; the checkpoint does not belong to this run");
  }
  starts_ = {anchor_global_, anchor_global_ + anchor->steps()};
  deferred_ = {anchor->deferred_samples()};
  carried_[anchor_epoch_ + 1] = anchor->deferred_indices();
  recent_.push_back(anchor);
  return elastic;
}

}  // namespace sluice::runtime
