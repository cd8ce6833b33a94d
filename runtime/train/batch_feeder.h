#pragma once
// The data rank's side of `sluice train`: reads the batches of the plan from the cache, collates
// them, and sends each to its model rank against that rank's credits.
//
// Threads: `reader_threads` workers read and collate batches in plan order, at most
// `read_ahead` batches per model rank ahead of the sender; the calling thread sends (it is the
// thread that may make MPI calls). A worker's exception ends the feed and is rethrown by run().
//
// A batch's path: a reader thread reads and collates it (BatchAssembler) into
// FeedOptions::batch_memory and hands it to BatchWork::on_collated; the sender takes it in plan
// order, lets BatchWork::to_send move it (a GPU data rank's upload and GPU work) and sends it.
// The train job's BatchWork is runtime/train/data_side.h.
//
// Timing (timing/span_recorder.h): workers record cache_read and collate on lanes "reader N";
// the sender records wait_for_reader, credit_wait and send (split by the channel's own wait and
// transfer times) with the peer rank and the channel sequence number, and samples the counter
// "queue_depth" (batches collated and waiting to be sent) once per batch.
#include <cstdint>
#include <functional>
#include <memory_resource>
#include <vector>

#include "cache/cache_reader.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/plan_schedule.h"
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
  double collate_s = 0;  // padding into batch buffers (and on_collated), summed over worker threads
  double wait_s = 0;     // sender blocked for a credit or a batch to be ready
  double device_s = 0;   // sender in BatchWork::to_send for the batches it moved (uploads, GPU work)
  double wall_s = 0;
};

// What a data rank does to its batches between collation and the send.
class BatchWork {
 public:
  virtual ~BatchWork() = default;
  // Reader threads, on each collated batch inside its collate span (e.g. normalisation and masks
  // on a CPU data rank). Must be thread-safe.
  virtual void on_collated(BatchBytes& batch, int64_t global_step) = 0;
  // The sending thread, before each send: the memory to send instead of the host bytes (e.g. the
  // batch uploaded to the GPU and transformed there), or nullptr to send the host bytes. Records
  // its own spans (host_to_device, gpu_work).
  virtual const void* to_send(const BatchBytes& batch, int64_t global_step, int target_rank) = 0;
};

struct FeedOptions {
  int reader_threads = 2;
  int read_ahead = 4;
  int rank = 0;                  // this data rank (for injected delays)
  timing::InjectedDelay delay;   // debug.delay_*: off by default
  // Called on the sending thread after every send (the live status line's chance to talk MPI).
  std::function<void(int64_t global_step)> after_send;
  // Work on each batch; null: the collated host bytes are sent as they are. Must outlive run().
  BatchWork* work = nullptr;
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
  struct Tasks;      // run()'s batches in send order (batch_feeder.cpp)
  class ReadAhead;   // the batches collated ahead of the sender (batch_feeder.cpp)

  // A reader thread: collates tasks until every one is taken or the feed stops.
  void collate_ahead(int reader_index, const Tasks& tasks, ReadAhead& ahead);
  // The sending thread: every task's batch in order; stops early when a reader failed.
  FeedStats send_all(const Tasks& tasks, ReadAhead& ahead, uint16_t queue_depth_counter);
  void send(const FeedTarget& target, int64_t global, BatchBytes& bytes, FeedStats& stats);

  cache::CacheReader& reader_;
  const PlanSchedule& schedule_;
  FeedOptions options_;
  int last_target_rank_ = -1;
};

}  // namespace sluice::runtime
