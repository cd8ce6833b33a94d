#include "runtime/transport/cuda_ipc_channel.h"

#include "common/error.h"

#if !SLUICE_HAVE_CUDA

namespace sluice::transport {

std::unique_ptr<SendChannel> make_cuda_ipc_send_channel(const MpiSession&, int, int, const ChannelOptions&) {
  throw ConfigError("the cuda_ipc transport is not in this build: CMake found no CUDA toolkit (use mpi, or "
                    "rebuild with -DSLUICE_CUDA=ON on a machine with CUDA)");
}
std::unique_ptr<ReceiveChannel> make_cuda_ipc_receive_channel(const MpiSession&, int, int, const ChannelOptions&) {
  throw ConfigError("the cuda_ipc transport is not in this build: CMake found no CUDA toolkit (use mpi, or "
                    "rebuild with -DSLUICE_CUDA=ON on a machine with CUDA)");
}

}  // namespace sluice::transport

#else

#include <cstring>
#include <limits>

#include "common/log.h"
#include "runtime/transport/cuda_support.h"
#include "runtime/transport/mpi_feed.h"

namespace sluice::transport {
namespace {

using detail::BatchHeader;
using detail::Deadline;
using detail::FeedTag;
using detail::feed_tag;

// Set-up messages (tag k=5): the receiver's slots at construction, the sender's "unmapped" at
// destruction (after which the receiver may free its slots).
struct SlotHandles {
  uint32_t magic = detail::feed_magic;
  int32_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t stride = 0;
  cudaIpcMemHandle_t handle{};
};

struct Unmapped {
  uint32_t magic = detail::feed_magic + 1;
};

// How long a destructor waits for the peer's part of the teardown.
constexpr double teardown_grace_s = 2.0;

void check_gpu_options(const ChannelOptions& options) {
  detail::check_options(options, "cuda_ipc", std::numeric_limits<size_t>::max() / 4);
  if (options.checksum) {
    throw ConfigError("feed channel \"" + options.name +
                      "\" (cuda_ipc): checksum is for host transports; the batch is in device memory");
  }
}

class CudaIpcSendChannel final : public detail::MpiFeedSender {
 public:
  CudaIpcSendChannel(const MpiSession& session, int receiver, int device, const ChannelOptions& options)
      : MpiFeedSender(session, receiver, options, "cuda_ipc"), device_(device) {
    detail::DeviceGuard guard(device);
    stream_ = std::make_unique<detail::CudaStream>();
    copied_ = std::make_unique<detail::CudaEvent>();
    const std::string payload =
        receive_string(session, receiver, feed_tag(options.channel_id, FeedTag::setup),
                       sluice::deadline_after(options.timeout_s), "the receiver's slot handles (cuda_ipc)");
    SlotHandles handles;
    if (payload.size() != sizeof(handles)) fail(failure_text("malformed slot handles from the receiver"));
    std::memcpy(&handles, payload.data(), sizeof(handles));
    if (handles.magic != detail::feed_magic || handles.slots != options.slots ||
        handles.slot_bytes != options.slot_bytes) {
      fail(failure_text("the receiver has " + std::to_string(handles.slots) + " slots of " +
                            std::to_string(handles.slot_bytes) + " bytes, this sender expects " +
                            std::to_string(options.slots) + " of " + std::to_string(options.slot_bytes),
                        "Both ends of a channel must be made with the same ChannelOptions and channel_id"));
    }
    stride_ = handles.stride;
    try {
      SLUICE_CUDA_CHECK(cudaIpcOpenMemHandle(&peer_slots_, handles.handle, cudaIpcMemLazyEnablePeerAccess));
    } catch (const TransportError& error) {
      fail(failure_text(std::string("opening the receiver's slots failed: ") + error.what(),
                        "cuda_ipc needs both ranks on one node"));
    }
  }

  ~CudaIpcSendChannel() override {
    try {
      detail::DeviceGuard guard(device_);
      // A copy still running into the peer's slots must finish before the mapping goes.
      const Deadline deadline = detail::deadline_after(teardown_grace_s);
      detail::PollBackoff backoff;
      while (!detail::event_done(copied_->get()) && detail::Clock::now() < deadline) backoff.pause();
      if (!detail::event_done(copied_->get())) {
        log::get("runtime")->warn("feed channel \"{}\": a copy into {}'s slots did not finish; mapping kept",
                                  options_.name, names_.peer);
        return;
      }
      if (peer_slots_ != nullptr) SLUICE_CUDA_CHECK(cudaIpcCloseMemHandle(peer_slots_));
      const Unmapped unmapped;
      send_string(session_, peer_, feed_tag(options_.channel_id, FeedTag::setup),
                  std::string(reinterpret_cast<const char*>(&unmapped), sizeof(unmapped)),
                  sluice::deadline_after(teardown_grace_s), "the unmapped notice (cuda_ipc)");
    } catch (const std::exception& error) {
      log::get("runtime")->warn("feed channel \"{}\": closing the cuda_ipc sender: {}", options_.name, error.what());
    }
  }

 private:
  bool host_memory() const override { return false; }

  void transfer(const void* data, size_t bytes, const BatchHeader& header, Deadline deadline) override {
    detail::DeviceGuard guard(device_);
    void* destination = static_cast<std::byte*>(peer_slots_) + static_cast<size_t>(header.slot) * stride_;
    if (bytes > 0) {
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(destination, data, bytes, cudaMemcpyDefault, stream_->get()));
    }
    SLUICE_CUDA_CHECK(cudaEventRecord(copied_->get(), stream_->get()));
    wait_for([&] { return detail::event_done(copied_->get()); }, deadline,
             "the copy of batch " + std::to_string(header.sequence) + " into the receiver's slot",
             bytes);  // a device copy: done in microseconds, and the receiver waits for its header
    // The bytes are in place: the header tells the receiver so.
    send_header(header);
  }

  int device_;
  std::unique_ptr<detail::CudaStream> stream_;  // made on device_
  std::unique_ptr<detail::CudaEvent> copied_;
  void* peer_slots_ = nullptr;
  size_t stride_ = 0;
};

class CudaIpcReceiveChannel final : public detail::MpiFeedReceiver {
 public:
  CudaIpcReceiveChannel(const MpiSession& session, int sender, int device, const ChannelOptions& options)
      : MpiFeedReceiver(session, sender, options, "cuda_ipc"), device_(device) {
    detail::DeviceGuard guard(device);
    slots_ = std::make_unique<detail::DeviceSlots>(options.slots, options.slot_bytes);
    SlotHandles handles;
    handles.slots = options.slots;
    handles.slot_bytes = options.slot_bytes;
    handles.stride = slots_->stride();
    SLUICE_CUDA_CHECK(cudaIpcGetMemHandle(&handles.handle, slots_->base()));
    send_string(session, sender, feed_tag(options.channel_id, FeedTag::setup),
                std::string(reinterpret_cast<const char*>(&handles), sizeof(handles)),
                sluice::deadline_after(options.timeout_s), "the slot handles (cuda_ipc)");
    grant_all();
  }

  ~CudaIpcReceiveChannel() override {
    shut_down_for_destruction();
    // The sender maps our slots: free them only after it said it unmapped them.
    try {
      receive_string(session_, peer_, feed_tag(options_.channel_id, FeedTag::setup),
                     sluice::deadline_after(teardown_grace_s), "the sender's unmapped notice (cuda_ipc)");
    } catch (const std::exception&) {
      log::get("runtime")->warn("feed channel \"{}\": {} did not unmap the slots in time; they stay allocated",
                                options_.name, names_.peer);
      slots_->leak();
    }
    if (slots_must_leak_) slots_->leak();  // keep_slots_alive()
    try {
      detail::DeviceGuard guard(device_);
      slots_.reset();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("feed channel \"{}\": freeing the slots: {}", options_.name, error.what());
    }
  }

 private:
  void* slot_data(int slot) override { return slots_->slot(slot); }
  bool host_memory() const override { return false; }
  // The sender copies before it sends the header: a header means the bytes are in place.
  bool payload_complete(int, const BatchHeader&, size_t*) override { return true; }

  int device_;
  std::unique_ptr<detail::DeviceSlots> slots_;  // on device_
};

}  // namespace

std::unique_ptr<SendChannel> make_cuda_ipc_send_channel(const MpiSession& session, int receiver, int device,
                                                        const ChannelOptions& options) {
  check_gpu_options(options);
  return std::make_unique<CudaIpcSendChannel>(session, receiver, device, options);
}

std::unique_ptr<ReceiveChannel> make_cuda_ipc_receive_channel(const MpiSession& session, int sender, int device,
                                                              const ChannelOptions& options) {
  check_gpu_options(options);
  return std::make_unique<CudaIpcReceiveChannel>(session, sender, device, options);
}

}  // namespace sluice::transport

#endif  // SLUICE_HAVE_CUDA
