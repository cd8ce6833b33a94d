#pragma once
// Batches collated once per bucket and kept in memory: the baseline of the input-pipeline
// efficiency benchmark (train.replay_from_memory). Same shapes in the same order as the real
// feed, no cache reads, no transport. On a GPU model rank (`gpu` >= 0) the batches are uploaded
// once and stay in device memory, as a fed batch arrives there. A C++ model rank's batch stream
// (batch_stream.h) reads them in place of a channel.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "cache/cache_reader.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/plan_schedule.h"
#include "runtime/transport/device_memory.h"

namespace sluice::runtime {

class ReplayBatches {
 public:
  // Collates one batch per bucket from the plan column `model_index`, starting at `first_step`.
  ReplayBatches(cache::CacheReader& reader, const PlanSchedule& schedule, int model_index, int gpu,
                int64_t first_step);

  // The batch of `global` in host memory; its header carries the planned position. Valid until
  // the next call.
  BatchPointers at(int64_t global);
  // The same batch in device memory (after at(global)); nullopt on the host.
  std::optional<DeviceBatch> on_device(const BatchPointers& host) const;

 private:
  const PlanSchedule& schedule_;
  int model_index_;
  std::map<int32_t, BatchBytes> by_bucket_;
  std::map<int32_t, std::unique_ptr<transport::DeviceUpload>> on_device_;
};

}  // namespace sluice::runtime
