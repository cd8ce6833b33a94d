#pragma once
// Data-parallel gradient reduction over MPI for CPU model ranks (model/gradient_reducer.h has
// the protocol): each bucket is an MPI_Iallreduce started as soon as backward finishes it, so
// reduction overlaps the rest of backward; wait_all() waits while the other model ranks are alive
// (the process's heartbeat, common/heartbeat.h) and names the first that goes silent for
// timeout_s; without a heartbeat it waits timeout_s.
#include <mpi.h>

#include <string>
#include <vector>

#include "common/mpi_handle.h"
#include "model/gradient_reducer.h"

namespace sluice::runtime {

class MpiGradientReducer : public model::GradientReducer {
 public:
  // `model_comm` holds exactly the model ranks; collective over it (the reducer works on a
  // duplicate of its own, which it keeps past an error that leaves a reduction in flight).
  // `names` describes the other members (rank and host) for errors.
  MpiGradientReducer(MPI_Comm model_comm, double timeout_s, std::string names);
  ~MpiGradientReducer() override;

  int world_size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(float* data, size_t count) override;
  void start(int bucket_id, float* data, size_t count) override;
  void wait_all() override;
  bool in_flight() const override;

  // Seconds spent inside wait_all() / all_reduce_sum(): the reduction not hidden behind backward.
  double exposed_seconds() const { return exposed_seconds_; }

  // The report's baseline: bytes per second of a blocking all-reduce of `floats` floats among the
  // model ranks with nothing else running (best of `repeats`). Collective: every model rank calls
  // it at the same point. Not counted in exposed_seconds().
  double measure_bandwidth(size_t floats, int repeats);

 private:
  void wait(std::vector<MPI_Request>& requests, const char* what);

  MpiCommunicator comm_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  std::string names_;
  std::vector<int> others_;  // the other members' world ranks
  std::vector<MPI_Request> pending_;
  // all_reduce_sum()'s small reductions run in memory of the reducer's own, so that one an error
  // leaves in flight (in_flight()) writes into memory that is kept, not into a caller's freed
  // vector; larger ones (measure_bandwidth's) run in place.
  std::vector<float> small_;
  std::vector<MPI_Request> abandoned_;  // all_reduce_sum()'s, left in flight by an error
  double exposed_seconds_ = 0;
  // Timing: the buckets of one step in flight, from the first start() to wait_all()'s end, as
  // one allreduce_overlapped span on the lane "allreduce".
  int64_t first_start_ns_ = -1;
  int64_t pending_bytes_ = 0;
};

}  // namespace sluice::runtime
