#include "runtime/train/mpi_gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/kept_until_exit.h"
#include "common/mpi_session.h"
#include "runtime/train/progress_watchdog.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {

MpiGradientReducer::MpiGradientReducer(MPI_Comm model_comm, double timeout_s, std::string names)
    : comm_(MpiCommunicator::duplicate(model_comm, "the gradient reduction's communicator")),
      timeout_s_(timeout_s),
      names_(std::move(names)) {
  rank_ = comm_.rank();
  size_ = comm_.size();
  // The other members as world ranks: the heartbeat knows ranks of the world.
  MPI_Group group, world;
  check_mpi(MPI_Comm_group(comm_.get(), &group), "MPI_Comm_group(model ranks)");
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group(world)");
  std::vector<int> members(static_cast<size_t>(size_)), in_world(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) members[static_cast<size_t>(r)] = r;
  check_mpi(MPI_Group_translate_ranks(group, size_, members.data(), world, in_world.data()),
            "MPI_Group_translate_ranks(model ranks)");
  check_mpi_or_warn(MPI_Group_free(&group), "MPI_Group_free");
  check_mpi_or_warn(MPI_Group_free(&world), "MPI_Group_free");
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) others_.push_back(in_world[static_cast<size_t>(r)]);
  }
}

MpiGradientReducer::~MpiGradientReducer() {
  // Requests an error left in flight are not freed: MPI_Request_free of a non-blocking collective
  // is erroneous, and Open MPI's libnbc, given one, failed with MPI_ERR_REQUEST and crashed the
  // rank (SIGSEGV) in the heartbeat thread's next MPI call. The collective may still use what it
  // was given: the communicator is not freed, the small reductions' memory is kept, as the
  // Trainer keeps its gradients (in_flight()). The job is ending; MPI_Abort or MPI_Finalize follows.
  if (in_flight()) {
    comm_.abandon();
    keep_until_exit(std::move(small_));
  }
}

bool MpiGradientReducer::in_flight() const {
  const auto active = [](const std::vector<MPI_Request>& requests) {
    return std::any_of(requests.begin(), requests.end(), [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
  };
  return active(pending_) || active(abandoned_);
}

void MpiGradientReducer::wait(std::vector<MPI_Request>& requests, const char* what) {
  const auto begin = std::chrono::steady_clock::now();
  const Deadline deadline = deadline_after(timeout_s_);
  // LIVENESS (common/heartbeat.h): with a heartbeat, the wait lasts as long as every other
  // model rank is alive, however slow its step, and names the one that went silent (not the
  // members merely waiting, as a deadline on the collective would).
  const Heartbeat* heartbeat = Heartbeat::process();
  // The time waited is the other model ranks' (runtime/train/progress_watchdog.h).
  const ProgressWatchdog::PeerWait waiting_on_peers(others_, what);
  int polls = 0;
  while (!requests.empty()) {
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall(gradient all-reduce)");
    if (done) break;
    if (heartbeat != nullptr) {
      const int silent = heartbeat->first_lost(others_, timeout_s_);
      if (silent >= 0) {
        throw TransportError(std::string(heartbeat->failed(silent) ? "stopped in the " : "timed out in the ") + what + ": " +
                             heartbeat->describe_loss(silent, timeout_s_) +
                             " (the model ranks in it: " + names_ + ")");
      }
    } else if (std::chrono::steady_clock::now() > deadline) {
      throw TransportError(std::string("timed out after ") + std::to_string(timeout_s_) + " s in the " +
                           what + " waiting for the other model rank(s): " + names_ +
                           ". One of them died, hung, lost its network or is far behind (its log, or mpirun, "
                           "names it)");
    }
    // Spin while the reduction is likely close (the common case), then sleep a little: a wait
    // on a slow rank must not take the cores that rank may share with this one.
    if (++polls < 10000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  requests.clear();
  exposed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

void MpiGradientReducer::all_reduce_sum(float* data, size_t count) {
  constexpr size_t small_floats = 16384;  // 64 KiB: the run's flags and losses, not measure_bandwidth's
  float* reduced = data;
  if (count <= small_floats) {
    small_.assign(data, data + count);
    reduced = small_.data();
  }
  std::vector<MPI_Request> requests;
  for (size_t offset = 0; offset < count;) {
    // MPI counts are int: split reductions larger than 2^31 - 1 elements.
    const size_t piece = std::min(count - offset, static_cast<size_t>(INT_MAX));
    requests.emplace_back();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, reduced + offset, static_cast<int>(piece), MPI_FLOAT, MPI_SUM, comm_.get(),
                             &requests.back()),
              "MPI_Iallreduce(gradients)");
    offset += piece;
  }
  try {
    wait(requests, "gradient all-reduce");
  } catch (...) {
    abandoned_.insert(abandoned_.end(), requests.begin(), requests.end());
    throw;
  }
  if (reduced != data) std::copy(small_.begin(), small_.end(), data);
}

double MpiGradientReducer::measure_bandwidth(size_t floats, int repeats) {
  std::vector<float> buffer(std::max<size_t>(1, floats), 1.0f);
  const double exposed = exposed_seconds_;
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    try {
      all_reduce_sum(buffer.data(), buffer.size());
    } catch (...) {
      if (in_flight()) keep_until_exit(std::move(buffer));
      throw;
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  exposed_seconds_ = exposed;
  return static_cast<double>(buffer.size() * sizeof(float)) / best;
}

void MpiGradientReducer::start(int /*bucket_id*/, float* data, size_t count) {
  // Buckets are started in the same order on every rank (the trainer's contract), which is what
  // MPI requires of non-blocking collectives on one communicator.
  if (first_start_ns_ < 0) first_start_ns_ = timing::now_ns();
  pending_bytes_ += static_cast<int64_t>(count * sizeof(float));
  pending_.emplace_back();
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_.get(), &pending_.back()),
            "MPI_Iallreduce(gradient bucket)");
  // Open MPI progresses non-blocking collectives only inside MPI calls; testing here, once per
  // bucket, moves the earlier buckets along while backward computes the next ones.
  int done = 0;
  check_mpi(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE),
            "MPI_Testall(gradient buckets)");
}

void MpiGradientReducer::wait_all() {
  wait(pending_, "bucketed gradient all-reduce");
  if (first_start_ns_ >= 0) {
    auto& recorder = timing::SpanRecorder::global();
    timing::Span span;
    span.stage = timing::Stage::allreduce_overlapped;
    span.start_ns = first_start_ns_;
    span.end_ns = timing::now_ns();
    span.bytes = pending_bytes_;
    recorder.record_on(recorder.named_lane("allreduce"), span);
  }
  first_start_ns_ = -1;
  pending_bytes_ = 0;
}

}  // namespace sluice::runtime
