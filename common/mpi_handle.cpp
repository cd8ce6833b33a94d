#include "common/mpi_handle.h"

#include <string>

#include "common/error.h"
#include "common/log.h"

namespace sluice {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw TransportError(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

bool check_mpi_or_warn(int code, const char* call) noexcept {
  if (code == MPI_SUCCESS) return true;
  try {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    log::get("common")->warn("{} failed: {}", call, std::string(text, static_cast<size_t>(length)));
  } catch (...) {
    // Logging failed too: nothing more can be said from a clean-up path.
  }
  return false;
}

namespace {

std::string named(const char* call, const char* what) { return std::string(call) + "(" + what + ")"; }

// A new communicator's errors come back as codes, as the world's do (MpiSession).
MPI_Comm returning_errors(MPI_Comm comm, const char* what) {
  if (comm != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), named("MPI_Comm_set_errhandler", what).c_str());
  }
  return comm;
}

}  // namespace

MpiCommunicator MpiCommunicator::split(MPI_Comm parent, bool member, int key, const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(parent, member ? 1 : MPI_UNDEFINED, key, &comm), named("MPI_Comm_split", what).c_str());
  MpiCommunicator handle(comm);  // owned before anything else may throw
  returning_errors(comm, what);
  return handle;
}

MpiCommunicator MpiCommunicator::split_by_node(MPI_Comm parent, int key, const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &comm),
            named("MPI_Comm_split_type", what).c_str());
  MpiCommunicator handle(comm);
  returning_errors(comm, what);
  return handle;
}

MpiCommunicator MpiCommunicator::duplicate(MPI_Comm parent, const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(parent, &comm), named("MPI_Comm_dup", what).c_str());
  MpiCommunicator handle(comm);
  returning_errors(comm, what);
  return handle;
}

int MpiCommunicator::rank() const {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm_, &rank), "MPI_Comm_rank");
  return rank;
}

int MpiCommunicator::size() const {
  int size = 0;
  check_mpi(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
  return size;
}

MpiCommunicator::~MpiCommunicator() { free(); }

MpiCommunicator::MpiCommunicator(MpiCommunicator&& other) noexcept : comm_(other.comm_) {
  other.comm_ = MPI_COMM_NULL;
}

MpiCommunicator& MpiCommunicator::operator=(MpiCommunicator&& other) noexcept {
  if (this != &other) {
    free();
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

void MpiCommunicator::free() noexcept {
  if (comm_ == MPI_COMM_NULL) return;
  int finalised = 0;
  // After MPI_Finalize there is nothing left to free (and an MPI that cannot say is not asked to).
  if (check_mpi_or_warn(MPI_Finalized(&finalised), "MPI_Finalized") && !finalised) {
    // Local: it marks the communicator for release once pending point-to-point requests
    // complete, so a failed run does not wait here (a collective left in flight: abandon()).
    check_mpi_or_warn(MPI_Comm_free(&comm_), "MPI_Comm_free");
  }
  comm_ = MPI_COMM_NULL;
}

}  // namespace sluice
