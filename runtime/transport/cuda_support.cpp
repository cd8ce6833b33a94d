#include "runtime/transport/cuda_support.h"

#if SLUICE_HAVE_CUDA

#include <new>
#include <thread>

#include <cuda.h>  // CUresult and CUdevice only: the driver is reached through the runtime's entry points

#include "common/error.h"
#include "common/log.h"

namespace sluice::transport::detail {
namespace {

void log_cuda(cudaError_t code, const char* what) {
  if (code != cudaSuccess) log::get("runtime")->warn("{}: {}", what, cudaGetErrorString(code));
}

// A driver function through the runtime (no link to libcuda); null when not found.
void* driver_function(const char* symbol) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, &function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t status = cudaGetDriverEntryPoint(symbol, &function, cudaEnableDefault, &found);
#endif
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return function;
}

// Whether `device` has an active primary context in this process. Since CUDA 12.0 cudaSetDevice
// creates the primary context of the device it selects, and cudaGetDevice reports device 0 on a
// thread that never chose one: a guard that "restores" device 0 would create a context there
// (hundreds of MiB of GPU 0 per rank on a multi-GPU node). PyTorch's device guard checks the same
// (pytorch/pytorch#94864). True when it cannot tell, which restores as before.
bool has_primary_context(int device) {
  using DeviceGet = CUresult (*)(CUdevice*, int);
  using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const auto device_get = reinterpret_cast<DeviceGet>(driver_function("cuDeviceGet"));
  static const auto get_state = reinterpret_cast<PrimaryCtxGetState>(driver_function("cuDevicePrimaryCtxGetState"));
  if (device_get == nullptr || get_state == nullptr) return true;
  CUdevice handle = 0;
  unsigned int flags = 0;
  int active = 0;
  if (device_get(&handle, device) != CUDA_SUCCESS || get_state(handle, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

}  // namespace

bool event_done(cudaEvent_t event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaErrorNotReady) return false;
  cuda_check(state, "cudaEventQuery", __FILE__, __LINE__);
  return true;
}

DeviceGuard::DeviceGuard(int device) {
  SLUICE_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    // Restore only a device this process already uses (see has_primary_context); otherwise
    // `device` stays current for this thread.
    const bool restore = has_primary_context(previous_);
    SLUICE_CUDA_CHECK(cudaSetDevice(device));
    restore_ = restore;
  }
}

DeviceGuard::~DeviceGuard() {
  if (restore_) log_cuda(cudaSetDevice(previous_), "restoring the CUDA device");
}

CudaStream::CudaStream() { SLUICE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
CudaStream::~CudaStream() {
  if (stream_ != nullptr) log_cuda(cudaStreamDestroy(stream_), "cudaStreamDestroy");
}

CudaEvent::CudaEvent() { SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
CudaEvent::~CudaEvent() {
  if (event_ != nullptr) log_cuda(cudaEventDestroy(event_), "cudaEventDestroy");
}

DeviceSlots::DeviceSlots(int slots, size_t slot_bytes) {
  constexpr size_t alignment = 4096;
  stride_ = (slot_bytes + alignment - 1) / alignment * alignment;
  SLUICE_CUDA_CHECK(cudaMalloc(&base_, stride_ * static_cast<size_t>(slots)));
}

DeviceSlots::~DeviceSlots() {
  if (base_ != nullptr) log_cuda(cudaFree(base_), "cudaFree(feed slots)");
}

#if SLUICE_HAVE_NCCL

NcclComm::NcclComm(const ncclUniqueId& id, int nranks, int rank, Deadline deadline, const std::string& peer) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  PollBackoff backoff;
  try {
    // Inside the try: a non-blocking init that fails at once still returns the communicator (in
    // its error state), which must be aborted to free it; the destructor does not run for it.
    SLUICE_NCCL_CHECK(ncclCommInitRankConfig(&comm_, nranks, id, rank, &config), comm_);
    while (busy()) {
      if (Clock::now() > deadline) {
        throw TransportError("timed out creating the NCCL communicator with " + peer +
                             " (it never joined: dead, hung, or not making its end of the channel)");
      }
      backoff.pause();
    }
  } catch (...) {
    abort();
    throw;
  }
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr || aborted_) return;
  // Finalize flushes outstanding work; a peer that is gone can keep it busy: then abort.
  bool clean = false;
  const ncclResult_t result = ncclCommFinalize(comm_);
  if (result == ncclSuccess || result == ncclInProgress) {
    const Deadline deadline = deadline_after(1.0);
    PollBackoff backoff;
    while (true) {
      ncclResult_t state = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
      if (state == ncclSuccess) {
        clean = true;
        break;
      }
      if (state != ncclInProgress || Clock::now() > deadline) break;
      backoff.pause();
    }
  }
  if (!clean) {
    log::get("runtime")->warn("NCCL communicator did not finalize cleanly; aborting it");
    ncclCommAbort(comm_);
    return;
  }
  ncclCommDestroy(comm_);
}

bool NcclComm::busy() const {
  if (aborted_) throw TransportError("the NCCL communicator was aborted after an earlier error");
  ncclResult_t state = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", __FILE__, __LINE__, comm_);
  if (state == ncclInProgress) return true;
  nccl_check(state, "NCCL communicator (asynchronous error)", __FILE__, __LINE__, comm_);
  return false;
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr || aborted_) return;
  aborted_ = true;
  const ncclResult_t result = ncclCommAbort(comm_);
  if (result != ncclSuccess) {
    log::get("runtime")->warn("ncclCommAbort: {}", ncclGetErrorString(result));
  }
}

#endif  // SLUICE_HAVE_NCCL

}  // namespace sluice::transport::detail

#endif  // SLUICE_HAVE_CUDA
