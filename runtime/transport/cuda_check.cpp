#include "runtime/transport/cuda_check.h"

#if SLUICE_HAVE_CUDA

#include <string>

#include "common/error.h"

namespace sluice::transport {
namespace {

// The device the failed call ran on, for the message; -1 when even that cannot be asked.
int current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
}

}  // namespace

void cuda_check(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  throw TransportError(std::string(call) + " failed on CUDA device " + std::to_string(current_device()) + ": " +
                       cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ") at " + file + ":" +
                       std::to_string(line));
}

#if SLUICE_HAVE_NCCL
void nccl_check(ncclResult_t code, const char* call, const char* file, int line, ncclComm_t comm) {
  if (code == ncclSuccess) return;
  std::string text = std::string(call) + " failed on CUDA device " + std::to_string(current_device()) + ": " +
                     ncclGetErrorString(code);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  throw TransportError(text + " at " + file + ":" + std::to_string(line));
}
#endif

}  // namespace sluice::transport

#endif  // SLUICE_HAVE_CUDA
