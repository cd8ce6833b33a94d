#include "runtime/train/replay_batches.h"

#include "common/error.h"
#include "runtime/train/batch_assembler.h"

namespace sluice::runtime {

ReplayBatches::ReplayBatches(cache::CacheReader& reader, const PlanSchedule& schedule, int model_index, int gpu,
                             int64_t first_step)
    : schedule_(schedule), model_index_(model_index) {
  BatchAssembler assembler(reader);
  // Two epochs' worth of steps from the first hold one whole epoch, so every bucket, even when
  // the first is the shorter rest of an epoch (an elastic resume).
  for (int64_t step = first_step; step < first_step + 2 * schedule.steps_per_epoch(); ++step) {
    const ScheduledBatch scheduled = schedule.batch(step, model_index);
    auto& bytes = by_bucket_[scheduled.batch->bucket];
    if (!bytes.empty()) continue;
    assembler.assemble(scheduled, bytes);
    if (gpu >= 0) {
      auto& uploaded = on_device_[scheduled.batch->bucket];
      uploaded = std::make_unique<transport::DeviceUpload>(gpu, bytes.size());
      uploaded->upload(bytes.data(), bytes.size());
    }
  }
}

std::optional<DeviceBatch> ReplayBatches::on_device(const BatchPointers& host) const {
  const auto it = on_device_.find(host.header->bucket);
  if (it == on_device_.end()) return std::nullopt;
  DeviceBatch batch;
  batch.host = host;
  batch.device = BatchPointers::at(it->second->data(), *host.header);
  return batch;
}

BatchPointers ReplayBatches::at(int64_t global) {
  const ScheduledBatch scheduled = schedule_.batch(global, model_index_);
  auto found = by_bucket_.find(scheduled.batch->bucket);
  if (found == by_bucket_.end() && scheduled.shape().tail) {
    // A tail step (batch_plan.h, "Remainder") in an epoch after the two scanned, which had none:
    // the last bucket's batch stands in (its padded length, B samples instead of B').
    found = by_bucket_.find(scheduled.batch->bucket - 1);
  }
  if (found == by_bucket_.end()) {
    throw Error(ErrorKind::internal, "replay: no batch of bucket " + std::to_string(scheduled.batch->bucket) +
                                         " was assembled for global step " + std::to_string(global));
  }
  auto& bytes = found->second;
  // The header carries the position the stream checks; the payload is the bucket's batch.
  auto* header = reinterpret_cast<BatchHeader*>(bytes.data());
  header->epoch = scheduled.at.epoch;
  header->step = scheduled.at.step;
  return BatchPointers::of(bytes.data(), bytes.size());
}

}  // namespace sluice::runtime
