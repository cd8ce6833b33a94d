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

MpiCommunicator MpiCommunicator::split(MPI_Comm parent, bool member, int key, const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(parent, member ? 1 : MPI_UNDEFINED, key, &comm),
            (std::string("MPI_Comm_split(") + what + ")").c_str());
  return MpiCommunicator(comm);
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
  MPI_Finalized(&finalised);  // after MPI_Finalize there is nothing left to free
  if (!finalised) {
    // Local in practice: it marks the communicator for release once pending requests complete,
    // so a failed run (a reduction still outstanding) does not wait here.
    check_mpi_or_warn(MPI_Comm_free(&comm_), "MPI_Comm_free");
  }
  comm_ = MPI_COMM_NULL;
}

}  // namespace sluice
