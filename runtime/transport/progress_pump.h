#pragma once
// Private to runtime/transport. Moves a receiver's incoming batches during the trainer's step, on
// a thread of its own, instead of inside the trainer's next receive() or release().
//
// Why: MPI moves a large message only inside an MPI call of the processes involved. Over Open
// MPI's shared memory with a single-copy mechanism (CMA) the receiver copies the whole payload
// itself, with process_vm_readv, in whichever MPI call first sees the batch's rendezvous header.
// A trainer calls MPI only between steps, so without this every batch was copied on its critical
// path: 0.6-0.7 ms per 2.8 MB batch on a Python rank (perf: MpiFeedReceiver::release -> progress
// -> MPI_Test -> mca_btl_vader_get_cma), 2-3% of its 27 ms step (docs/performance.md).
//
// How: the pump calls MPI_Iprobe on a communicator of its own, on which nothing is ever sent. The
// probe never matches, but it runs MPI's progress engine (opal_progress), which moves whatever
// transfer of this process is pending, on the pump's thread. The pump touches no state of the
// channel: the channel's own MPI_Test later finds the request complete.
//
// Pacing (PollBackoff): after nudge() (a slot was granted, so a batch may start to come) it polls
// fast for the first milliseconds, then less often the longer nothing came, at most every 20 ms;
// an idle pump wakes ~50 times a second. Needs MPI_THREAD_MULTIPLE (concurrent MPI calls); with
// less (SLUICE_HEARTBEAT=serialized) start() does nothing and transfers move in the channel's
// calls, as before.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include <mpi.h>

#include "common/mpi_handle.h"

namespace sluice::transport::detail {

class ProgressPump {
 public:
  ProgressPump() = default;
  ~ProgressPump() { stop(); }
  ProgressPump(const ProgressPump&) = delete;
  ProgressPump& operator=(const ProgressPump&) = delete;

  // Starts the thread (MPI_THREAD_MULTIPLE only). `name`: the channel's, for the thread's log.
  void start();
  // A transfer may begin soon: poll fast again.
  void nudge();
  // Stops and joins the thread; no MPI call of the pump after it returns. Call it before
  // MPI_Finalize (the channel's shut-down does). Never throws.
  void stop() noexcept;
  bool running() const { return thread_.joinable(); }

 private:
  void run() noexcept;

  MpiCommunicator comm_;  // a duplicate of MPI_COMM_SELF: local, never sent on
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  uint64_t nudges_ = 0;
  std::thread thread_;
};

}  // namespace sluice::transport::detail
