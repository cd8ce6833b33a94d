#pragma once
// Reads a batch's samples from the cache and pads them into batch bytes
// (runtime/train/batch_buffer.h): the train job's one read-plus-collate, for the feeder's
// batches, the batches replayed from memory and the model ranks' validation batches.
#include <cstdint>
#include <vector>

#include "cache/cache_reader.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/plan_schedule.h"

namespace sluice::runtime {

// Keeps the samples between read() and collate() (the feeder times the two apart) and reuses
// them across batches. One per thread; `reader` must outlive it.
class BatchAssembler {
 public:
  explicit BatchAssembler(cache::CacheReader& reader) : reader_(reader) {}

  // Reads the samples of `indices` (cache indices, in batch order).
  void read(const std::vector<int64_t>& indices);
  // Pads the samples read last into `bytes` as `scheduled` (its bucket's shape; the header
  // names its epoch, step and bucket).
  void collate(const ScheduledBatch& scheduled, BatchBytes& bytes) const;
  // read() and collate() of a planned batch.
  void assemble(const ScheduledBatch& scheduled, BatchBytes& bytes);
  // A batch outside the plan (validation): `indices` in a shape fitted to them; the header's
  // epoch, step and bucket are -1.
  void assemble_unplanned(const std::vector<int64_t>& indices, BatchBytes& bytes);

 private:
  cache::CacheReader& reader_;
  std::vector<cache::Sample> samples_;
};

}  // namespace sluice::runtime
