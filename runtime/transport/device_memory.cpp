#include "runtime/transport/device_memory.h"

#include <string>

#include "common/error.h"

#if !SLUICE_HAVE_CUDA

namespace sluice::transport {
namespace {
[[noreturn]] void no_cuda() {
  throw ConfigError("GPU feed buffers are not in this build: CMake found no CUDA toolkit (use model.device: cpu "
                    "and roles.transport: mpi, or rebuild with -DSLUICE_CUDA=ON on a machine with CUDA)");
}
}  // namespace

struct DeviceUpload::Impl {};
DeviceUpload::DeviceUpload(int, size_t) { no_cuda(); }
DeviceUpload::~DeviceUpload() = default;
void* DeviceUpload::upload(const void*, size_t) { no_cuda(); }
void* DeviceUpload::data() const { no_cuda(); }
int DeviceUpload::device() const { no_cuda(); }
size_t DeviceUpload::capacity() const { no_cuda(); }
void copy_device_to_host(void*, const void*, size_t) { no_cuda(); }
void set_current_device(int) { no_cuda(); }
std::unique_ptr<std::pmr::memory_resource> make_pinned_memory_resource(int) { no_cuda(); }
size_t device_total_bytes(int) { no_cuda(); }

}  // namespace sluice::transport

#else

#include <algorithm>
#include <map>
#include <mutex>

#include "common/log.h"
#include "runtime/transport/cuda_support.h"

namespace sluice::transport {
namespace {

// Why not std::pmr::synchronized_pool_resource over a pinned upstream: libstdc++ pools blocks only
// up to a few MiB, so batch-sized blocks would be pinned and freed once per batch.
class PinnedBlocks final : public std::pmr::memory_resource {
 public:
  explicit PinnedBlocks(int device) : device_(device) {}
  ~PinnedBlocks() override {
    for (const auto& [pointer, bytes] : sizes_) {
      const cudaError_t code = cudaFreeHost(pointer);
      if (code != cudaSuccess) log::get("runtime")->warn("cudaFreeHost: {}", cudaGetErrorString(code));
    }
  }

 private:
  void* do_allocate(size_t bytes, size_t alignment) override {
    (void)alignment;  // cudaHostAlloc returns page-aligned memory
    std::lock_guard<std::mutex> lock(mutex_);
    const auto reusable = free_.lower_bound(bytes);
    if (reusable != free_.end() && reusable->first <= 2 * std::max<size_t>(bytes, 1)) {
      void* pointer = reusable->second;
      free_.erase(reusable);
      return pointer;
    }
    void* pointer = nullptr;
    // Reader threads allocate: without this, a thread's first CUDA call would set up a context on
    // device 0, whichever GPU the data rank uses.
    const detail::DeviceGuard guard(device_);
    SLUICE_CUDA_CHECK(cudaHostAlloc(&pointer, std::max<size_t>(bytes, 1), cudaHostAllocPortable));
    sizes_[pointer] = bytes;
    return pointer;
  }
  void do_deallocate(void* pointer, size_t, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace(sizes_.at(pointer), pointer);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  int device_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // bytes -> block, for reuse
  std::map<void*, size_t> sizes_;      // every block ever pinned
};

}  // namespace

std::unique_ptr<std::pmr::memory_resource> make_pinned_memory_resource(int device) {
  return std::make_unique<PinnedBlocks>(device);
}

struct DeviceUpload::Impl {
  int device;
  detail::DeviceGuard guard;  // the buffer and the stream belong to `device`
  detail::DeviceSlots buffer;
  detail::CudaStream stream;
  Impl(int device_index, size_t capacity) : device(device_index), guard(device_index), buffer(1, capacity) {}
};

DeviceUpload::DeviceUpload(int device, size_t capacity) : impl_(std::make_unique<Impl>(device, capacity)) {}
DeviceUpload::~DeviceUpload() = default;

void* DeviceUpload::upload(const void* host, size_t bytes) {
  if (bytes > impl_->buffer.stride()) {
    throw TransportError("upload of " + std::to_string(bytes) + " bytes into a " +
                         std::to_string(impl_->buffer.stride()) + "-byte device buffer");
  }
  detail::DeviceGuard guard(impl_->device);
  // From pinned memory (a data rank's batches) this is a DMA at the bus's rate; from pageable
  // memory the driver stages it. Either way the copy is complete when the stream is.
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(impl_->buffer.base(), host, bytes, cudaMemcpyHostToDevice, impl_->stream.get()));
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream.get()));
  return impl_->buffer.base();
}

void* DeviceUpload::data() const { return impl_->buffer.base(); }
int DeviceUpload::device() const { return impl_->device; }
size_t DeviceUpload::capacity() const { return impl_->buffer.stride(); }

void set_current_device(int device) { SLUICE_CUDA_CHECK(cudaSetDevice(device)); }

void copy_device_to_host(void* host, const void* device_memory, size_t bytes) {
  SLUICE_CUDA_CHECK(cudaMemcpy(host, device_memory, bytes, cudaMemcpyDeviceToHost));
}

size_t device_total_bytes(int device) {
  cudaDeviceProp properties{};
  SLUICE_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.totalGlobalMem;
}

}  // namespace sluice::transport

#endif
