#include "gpu_memory.h"

#include <stdexcept>

#include <cuda_runtime_api.h>

namespace sluice::transport::testing {
namespace {

void check(cudaError_t code, const char* call) {
  if (code != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(code));
}

}  // namespace

int gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

std::string gpu_skip_reason(int devices) {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(result);
  if (count < devices) {
    return "needs " + std::to_string(devices) + " CUDA devices, found " + std::to_string(count);
  }
  return "";
}

DeviceStaging::~DeviceStaging() {
  if (buffer_ != nullptr) cudaFree(buffer_);
}

const void* DeviceStaging::stage(const std::vector<uint8_t>& bytes) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  if (bytes.size() > capacity_) {
    if (buffer_ != nullptr) check(cudaFree(buffer_), "cudaFree");
    buffer_ = nullptr;
    check(cudaMalloc(&buffer_, bytes.size()), "cudaMalloc");
    capacity_ = bytes.size();
  }
  if (buffer_ == nullptr) {
    check(cudaMalloc(&buffer_, 1), "cudaMalloc");
    capacity_ = 1;
  }
  // From pageable memory cudaMemcpy may return once the bytes are staged for DMA, before they land
  // (CUDA's "API synchronization behavior"), and the channel reads them on a non-blocking stream,
  // unordered with this copy: wait for the device. Without it, batches arrived with an older
  // pattern under load on the H100 (BytesArriveIntactAndInOrder, nccl_loopback and cuda_ipc).
  if (!bytes.empty()) check(cudaMemcpy(buffer_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return buffer_;
}

std::vector<uint8_t> fetch_from_device(const ReceivedBatch& batch) {
  std::vector<uint8_t> bytes(batch.bytes);
  if (!bytes.empty()) check(cudaMemcpy(bytes.data(), batch.data, batch.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return bytes;
}

}  // namespace sluice::transport::testing
