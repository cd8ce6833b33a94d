#pragma once
// The process's MPI session and the few cross-rank exchanges sluice makes outside the data path.
//
// Every exchange here has a deadline: nothing waits forever for a rank that died or went silent.
// On a deadline the call throws TransportError naming the ranks (and their hosts) that were not
// heard from; the launcher then calls abort() so the other ranks are not left waiting either.
//
// Without mpirun/srun the same code runs as a one-rank world (MPI singleton).
#include <chrono>
#include <string>
#include <vector>

#include <mpi.h>

#include "common/clock.h"

namespace sluice {

class MpiSession {
 public:
  // Initialises MPI with MPI_THREAD_SERIALIZED (one thread at a time calls MPI: the main thread,
  // and a CUDA trainer's autograd thread while the main thread waits in backward) unless it is
  // already initialised, and exchanges host names (a collective made once at start-up).
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  const std::string& host() const { return hosts_[static_cast<size_t>(rank_)]; }
  // Ranks on this node (MPI_COMM_TYPE_SHARED) and this rank's place among them.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host_of(int rank) const { return hosts_.at(static_cast<size_t>(rank)); }
  // "rank 3 (host node07)": how errors name a rank.
  std::string describe(int rank) const;

  // Ends every rank of the job with `code`. Used after an error that other ranks may wait on.
  [[noreturn]] void abort(int code) const;

 private:
  bool owns_mpi_ = false;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::vector<std::string> hosts_;
};

// The one MPI error wrapper: throws TransportError("CALL failed: <MPI's message>") unless
// `code` is MPI_SUCCESS. Every MPI call in sluice goes through it (errors return as codes:
// MpiSession sets MPI_ERRORS_RETURN on the world communicator).
void check_mpi(int code, const char* call);
// The same wrapper for clean-up, where a throw would hide the error being handled or escape a
// destructor (cancelling and freeing requests a failed exchange leaves behind): logs a warning
// with MPI's message instead of throwing, and says whether `code` is MPI_SUCCESS.
bool check_mpi_or_warn(int code, const char* call) noexcept;

// A communicator split off another one (MPI_Comm_split), freed when the handle goes, on every
// path: a run that fails frees it as one that succeeds does. A rank outside the split holds
// MPI_COMM_NULL. Move-only. The destructor never throws: a failed MPI_Comm_free is logged.
class MpiCommunicator {
 public:
  MpiCommunicator() = default;
  // Collective over `parent`: every rank of it calls, members (`member` true) ordered by `key`.
  // `what` names the communicator in errors ("the model ranks' communicator").
  static MpiCommunicator split(MPI_Comm parent, bool member, int key, const char* what);
  ~MpiCommunicator();
  MpiCommunicator(MpiCommunicator&& other) noexcept;
  MpiCommunicator& operator=(MpiCommunicator&& other) noexcept;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm get() const { return comm_; }
  bool member() const { return comm_ != MPI_COMM_NULL; }

 private:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {}
  void free() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Sends `payload` to `destination`, waiting for the send to complete until `deadline`.
void send_string(const MpiSession& session, int destination, int tag, const std::string& payload,
                 Deadline deadline, const std::string& what);

// Receives one message with `tag` from `source` (or MPI_ANY_SOURCE; the sender is stored in
// *sender) before `deadline`. Throws TransportError naming the silent rank and `what` was awaited.
std::string receive_string(const MpiSession& session, int source, int tag, Deadline deadline,
                           const std::string& what, int* sender = nullptr);

// Receives a pending message with `tag` if one has arrived; never blocks.
bool try_receive_string(const MpiSession& session, int tag, std::string& payload, int& sender);

// Rank 0 gets every rank's `local` (index = rank); other ranks get an empty vector.
std::vector<std::string> gather_strings(const MpiSession& session, const std::string& local,
                                        int tag, double timeout_s, const std::string& what);

// Every rank gets rank 0's `value`.
std::string broadcast_string(const MpiSession& session, const std::string& value, int tag,
                             double timeout_s, const std::string& what);

}  // namespace sluice
