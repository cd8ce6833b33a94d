#pragma once
// The one MPI wrapper layer: every MPI return code is checked here (check_mpi, or
// check_mpi_or_warn on clean-up paths), and every communicator sluice makes is owned by a handle
// (MpiCommunicator) that frees it on every path.
#include <mpi.h>

namespace sluice {

// The one MPI error wrapper: throws TransportError("CALL failed: <MPI's message>") unless
// `code` is MPI_SUCCESS. Every MPI call in sluice goes through it (errors return as codes:
// MpiSession sets MPI_ERRORS_RETURN on the world communicator).
void check_mpi(int code, const char* call);
// The same wrapper for clean-up, where a throw would hide the error being handled or escape a
// destructor (cancelling and freeing requests a failed exchange leaves behind): logs a warning
// with MPI's message instead of throwing, and says whether `code` is MPI_SUCCESS.
bool check_mpi_or_warn(int code, const char* call) noexcept;

// A communicator made from another one (split, split by node, or duplicated), freed when the
// handle goes, on every path: a run that fails frees it as one that succeeds does; after
// MPI_Finalize there is nothing to free. A rank outside a split holds MPI_COMM_NULL. Move-only.
// The destructor never throws: a failed MPI_Comm_free is logged. Every communicator it makes
// returns errors as codes (MPI_ERRORS_RETURN), for check_mpi.
class MpiCommunicator {
 public:
  MpiCommunicator() = default;
  // Collective over `parent`: every rank of it calls, members (`member` true) ordered by `key`.
  // `what` names the communicator in errors ("the model ranks' communicator").
  static MpiCommunicator split(MPI_Comm parent, bool member, int key, const char* what);
  // Collective over `parent`: the ranks of each node (MPI_COMM_TYPE_SHARED), ordered by `key`.
  static MpiCommunicator split_by_node(MPI_Comm parent, int key, const char* what);
  // Collective over `parent`: the same ranks on a communicator of their own, whose messages
  // match no receive on `parent` (the heartbeat's; the progress pump's, of MPI_COMM_SELF).
  static MpiCommunicator duplicate(MPI_Comm parent, const char* what);
  ~MpiCommunicator();
  MpiCommunicator(MpiCommunicator&& other) noexcept;
  MpiCommunicator& operator=(MpiCommunicator&& other) noexcept;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm get() const { return comm_; }
  // Gives the communicator up without freeing it, for a collective an error left in flight: the
  // standard lets MPI_Comm_free wait for it, but Open MPI's libnbc went on using the freed
  // communicator and crashed (runtime/train/mpi_gradient_reducer.cpp). The process is ending.
  void abandon() noexcept { comm_ = MPI_COMM_NULL; }
  bool member() const { return comm_ != MPI_COMM_NULL; }
  // This rank's place in it and its size (checked; a member only).
  int rank() const;
  int size() const;

 private:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {}
  void free() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace sluice
