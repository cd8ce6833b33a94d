#pragma once
// Private to runtime/transport, compiled when SLUICE_HAVE_CUDA: RAII handles for the few CUDA
// objects the GPU transports own. Destructors log, never throw. CUDA and NCCL return codes become
// TransportError in cuda_check.h (public: bench/measure/ uses the same layer).
#if SLUICE_HAVE_CUDA

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>

#include "runtime/transport/channel_support.h"
#include "runtime/transport/cuda_check.h"

#if SLUICE_HAVE_NCCL
#include <nccl.h>
#endif

namespace sluice::transport::detail {

// cudaEventQuery as a poll: true when done, false when not yet; throws on an error.
bool event_done(cudaEvent_t event);

// Makes `device` current for the calling thread and restores the previous one, unless that one
// has no CUDA context in this process (restoring it would create one, CUDA >= 12): then `device`
// stays current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool restore_ = false;
};

// A non-blocking stream (no implicit sync with the legacy default stream) on the current device.
class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing (cheap to record and query).
class CudaEvent {
 public:
  CudaEvent();
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// K slots in one device allocation on the current device (one allocation: one IPC handle).
class DeviceSlots {
 public:
  DeviceSlots(int slots, size_t slot_bytes);
  ~DeviceSlots();
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;
  void* base() const { return base_; }
  size_t stride() const { return stride_; }
  void* slot(int index) const { return static_cast<std::byte*>(base_) + static_cast<size_t>(index) * stride_; }
  // Keeps the memory allocated: a peer may still write into it.
  void leak() { base_ = nullptr; }

 private:
  void* base_ = nullptr;
  size_t stride_ = 0;
};

#if SLUICE_HAVE_NCCL
// A non-blocking NCCL communicator (ncclConfig_t::blocking = 0): creating it and every operation
// can be polled against a deadline, and abort() cuts a hung one loose.
class NcclComm {
 public:
  // Starts ncclCommInitRankConfig and polls it until `deadline` (TransportError naming `peer`
  // on expiry, after aborting).
  NcclComm(const ncclUniqueId& id, int nranks, int rank, Deadline deadline, const std::string& peer);
  ~NcclComm();  // finalize within a grace period, else abort
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  // Whether the last call's work is still being enqueued (ncclInProgress); throws on an error,
  // including a peer's failure reported asynchronously.
  bool busy() const;
  void abort() noexcept;
  bool aborted() const { return aborted_; }

 private:
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};
#endif

}  // namespace sluice::transport::detail

#endif  // SLUICE_HAVE_CUDA
