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

}  // namespace sluice
