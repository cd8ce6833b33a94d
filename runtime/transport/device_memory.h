#pragma once
// Device memory for the GPU feed outside the channels: a data rank's upload buffer (the collated
// host batch copied to its GPU, where per-batch GPU work runs and from where nccl sends it) and a
// model rank's read-back of the few header bytes of a batch that arrived in device memory. No
// CUDA header here; in a build without CUDA every call throws ConfigError.
#include <cstddef>
#include <memory>
#include <memory_resource>

namespace sluice::transport {

// One device buffer of `capacity` bytes on `device`, filled from host memory on its own stream.
class DeviceUpload {
 public:
  DeviceUpload(int device, size_t capacity);
  ~DeviceUpload();
  DeviceUpload(const DeviceUpload&) = delete;
  DeviceUpload& operator=(const DeviceUpload&) = delete;

  // Copies `bytes` (<= capacity) from host memory to the device buffer and returns it once the
  // copy is complete. The previous upload's memory is overwritten: send it first.
  void* upload(const void* host, size_t bytes);
  void* data() const;
  int device() const;
  size_t capacity() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Page-locked (pinned) host memory for batches that go to a GPU: copies from it run at the bus's
// full rate and asynchronously, where pageable memory is staged by the driver at a fraction of it.
// Pinning is slow (milliseconds) and freeing pinned memory synchronises the device, so freed
// blocks are kept and handed out again to a batch of at most their size and at least half of it
// (batches come in a few bucket shapes, so a handful of blocks serve a whole run). The blocks
// are freed with the resource. Thread-safe; allocating threads use `device` (the GPU the copies
// go to) for the CUDA calls.
std::unique_ptr<std::pmr::memory_resource> make_pinned_memory_resource(int device);

// Makes `device` the calling thread's current CUDA device for good (cudaSetDevice), as every GPU
// rank does first: a CUDA call made without a device guard then lands on the rank's own GPU
// instead of setting up a context on device 0.
void set_current_device(int device);

// Synchronous copy of `bytes` from device memory (any device; unified addressing) to the host.
void copy_device_to_host(void* host, const void* device_memory, size_t bytes);

// Total memory of CUDA device `device` in bytes.
size_t device_total_bytes(int device);

}  // namespace sluice::transport
