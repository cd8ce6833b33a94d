#include "runtime/transport/progress_pump.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "common/poll_backoff.h"

namespace sluice::transport::detail {

void ProgressPump::start() {
  if (running()) return;
  int provided = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  if (provided < MPI_THREAD_MULTIPLE) return;
  comm_ = MpiCommunicator::duplicate(MPI_COMM_SELF, "MPI_COMM_SELF, the progress pump's");
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void ProgressPump::nudge() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++nudges_;
  }
  wake_.notify_one();
}

void ProgressPump::stop() noexcept {
  if (!running()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
  comm_ = MpiCommunicator();  // freed (logged, never thrown, on failure)
}

void ProgressPump::run() noexcept {
  PollBackoff backoff;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (nudges_ != seen) {
      seen = nudges_;
      backoff.reset();
    }
    lock.unlock();
    int matched = 0;
    if (!check_mpi_or_warn(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_.get(), &matched, MPI_STATUS_IGNORE),
                           "MPI_Iprobe(feed progress thread)")) {
      // Progress failed here: the channel's own calls will see and report the failure.
      log::get("runtime")->warn("feed progress thread: MPI_Iprobe failed; batches move in the trainer's calls only");
      return;
    }
    const Clock::duration pause = backoff.plan(Clock::now());
    lock.lock();
    if (pause > Clock::duration::zero()) {
      wake_.wait_for(lock, pause, [&] { return stopping_ || nudges_ != seen; });
    } else {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }
}

}  // namespace sluice::transport::detail
