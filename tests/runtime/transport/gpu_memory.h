#pragma once
// Test helpers for GPU transports: whether a usable GPU is here, and batches staged into and
// fetched from device memory. Compiled only when SLUICE_HAVE_CUDA.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "feed_channel_suite.h"
#include "runtime/transport/feed_channel.h"

namespace sluice::transport::testing {

// Empty when at least `devices` CUDA devices are usable, else why not (for GTEST_SKIP).
std::string gpu_skip_reason(int devices);
int gpu_count();

// A device buffer that send() reads a test's bytes from.
class DeviceStaging {
 public:
  explicit DeviceStaging(int device) : device_(device) {}
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  const void* stage(const std::vector<uint8_t>& bytes);

 private:
  int device_;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
};

// Copies a batch that lives in device memory to the host.
std::vector<uint8_t> fetch_from_device(const ReceivedBatch& batch);

// Two-rank harnesses (gpu_mpi_harness.cpp; the MPI test main): each rank uses GPU local_rank %
// devices. cuda_ipc needs one GPU, nccl two. `meet_after_test`: see MpiTransport.
std::unique_ptr<FeedHarness> cuda_ipc_harness(bool meet_after_test);
std::unique_ptr<FeedHarness> nccl_harness(bool meet_after_test);

}  // namespace sluice::transport::testing
