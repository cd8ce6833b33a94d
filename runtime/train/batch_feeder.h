#pragma once
// The data rank's side of `sluice train`: reads the batches of the plan from the cache, collates
// them, and sends each to its model rank against that rank's credits.
//
// Threads: `reader_threads` workers read and collate batches in plan order, at most
// `read_ahead` batches per model rank ahead of the sender; the calling thread sends (it is the
// thread that may make MPI calls). A worker's exception ends the feed and is rethrown by run().
//
// Timing (timing/span_recorder.h): workers record cache_read and collate on lanes "reader N";
// the sender records wait_for_reader, credit_wait and send (split by the channel's own wait and
// transfer times) with the peer rank and the channel sequence number, and samples the counter
// "queue_depth" (batches collated and waiting to be sent) once per batch.
#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <vector>

#include "cache/cache_reader.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/batch_plan.h"
#include "runtime/transport/feed_channel.h"
#include "timing/injected_delay.h"

namespace sluice::runtime {

// One model rank this data rank feeds: its place among the model ranks (its plan column) and
// the channel to it.
struct FeedTarget {
  int model_index = 0;
  transport::SendChannel* channel = nullptr;
  int rank = -1;  // the model rank (for timing spans); -1 in one process
};

struct FeedStats {
  int64_t batches = 0;
  int64_t bytes = 0;
  double read_s = 0;     // cache reads, summed over worker threads
  double collate_s = 0;  // padding into batch buffers, summed over worker threads
  double wait_s = 0;     // sender blocked for a credit or a batch to be ready
  double device_s = 0;   // sender uploading batches to its GPU and running GPU work (to_send)
  double wall_s = 0;
};

class PlanSchedule {
 public:
  // The batch plan of every epoch, built on demand (a plan is a pure function of its inputs).
  PlanSchedule(std::vector<PlanSample> train, BatchPlanConfig config, int model_ranks);
  std::shared_ptr<const BatchPlan> epoch(int64_t epoch) const;
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Global step g <-> position (epoch, step).
  PlanPosition position(int64_t global_step) const;
  const std::vector<PlanSample>& samples() const { return train_; }

 private:
  std::vector<PlanSample> train_;
  BatchPlanConfig config_;
  int model_ranks_;
  int64_t steps_per_epoch_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const BatchPlan>> recent_;  // a few epochs
};

struct FeedOptions {
  int reader_threads = 2;
  int read_ahead = 4;
  int rank = 0;                  // this data rank (for injected delays)
  timing::InjectedDelay delay;   // debug.delay_*: off by default
  // Called on the sending thread after every send (the live status line's chance to talk MPI).
  std::function<void(int64_t global_step)> after_send;
  // Host batch work (normalisation, masks on a CPU data rank): called by the reader threads on
  // each collated batch, inside its collate span. Must be thread-safe.
  std::function<void(BatchBytes& batch, int64_t global_step)> on_collated;
  // GPU data ranks: called on the sending thread before each send with the collated host batch;
  // returns the memory to send (e.g. the batch uploaded to the GPU and transformed there) and
  // records its own spans (host_to_device, gpu_work). Unset: the host bytes are sent.
  std::function<const void*(const BatchBytes& batch, int64_t global_step, int target_rank)> to_send;
  // Where collated batches live (BatchBytes): pinned host memory on a GPU data rank. Must be
  // thread-safe (reader threads allocate, the sending thread frees) and outlive the feeder.
  std::pmr::memory_resource* batch_memory = std::pmr::new_delete_resource();
};

class BatchFeeder {
 public:
  BatchFeeder(cache::CacheReader& reader, const PlanSchedule& schedule, FeedOptions options);
  // Sends global steps [first_step, end_step) to every target, then closes their channels.
  FeedStats run(int64_t first_step, int64_t end_step, const std::vector<FeedTarget>& targets);
  // The model rank the last (or current) send went to: whom a failed run() was waiting for.
  int last_target_rank() const { return last_target_rank_; }

 private:
  cache::CacheReader& reader_;
  const PlanSchedule& schedule_;
  FeedOptions options_;
  int last_target_rank_ = -1;
};

}  // namespace sluice::runtime
