#pragma once
// The one layer where CUDA and NCCL return codes become TransportError: the message names the
// call, the CUDA device and file:line. Used by the GPU transports and by code beside them that
// calls CUDA itself (bench/measure/gpu_transport_bench.cpp). Include it only from a target that links
// CUDA::cudart (and NCCL for the NCCL half), under SLUICE_HAVE_CUDA: it is the transport's one
// public header that includes cuda_runtime_api.h.
#if SLUICE_HAVE_CUDA

#include <cuda_runtime_api.h>

#if SLUICE_HAVE_NCCL
#include <nccl.h>
#endif

namespace sluice::transport {

// Throws unless `code` is cudaSuccess (clearing a non-sticky error, so that later calls are not
// blamed for it).
void cuda_check(cudaError_t code, const char* call, const char* file, int line);
#define SLUICE_CUDA_CHECK(call) ::sluice::transport::cuda_check((call), #call, __FILE__, __LINE__)

#if SLUICE_HAVE_NCCL
// Throws unless `code` is ncclSuccess; adds ncclGetLastError(comm) when NCCL has more to say.
void nccl_check(ncclResult_t code, const char* call, const char* file, int line, ncclComm_t comm = nullptr);
// For calls on a non-blocking communicator: ncclInProgress is not an error (a blocking
// communicator never returns it, so the macro serves both).
#define SLUICE_NCCL_CHECK(call, comm)                                                     \
  do {                                                                                    \
    const ncclResult_t sluice_nccl_result = (call);                                       \
    if (sluice_nccl_result != ncclInProgress)                                             \
      ::sluice::transport::nccl_check(sluice_nccl_result, #call, __FILE__, __LINE__, (comm)); \
  } while (0)
#endif

}  // namespace sluice::transport

#endif  // SLUICE_HAVE_CUDA
