#include "runtime/transport/nccl_channel.h"

#include "common/error.h"

#if !SLUICE_HAVE_NCCL

namespace sluice::transport {
namespace {
[[noreturn]] void not_built() {
  throw ConfigError("the nccl transport is not in this build: CMake found no CUDA toolkit with NCCL (use mpi "
                    "or cuda_ipc, or rebuild on a machine with NCCL)");
}
}  // namespace

std::unique_ptr<SendChannel> make_nccl_send_channel(const MpiSession&, int, int, const ChannelOptions&) { not_built(); }
std::unique_ptr<ReceiveChannel> make_nccl_receive_channel(const MpiSession&, int, int, const ChannelOptions&) {
  not_built();
}
ChannelPair make_nccl_loopback_channel_pair(int, const ChannelOptions&) { not_built(); }

}  // namespace sluice::transport

#else

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include "common/log.h"
#include "runtime/transport/cuda_support.h"
#include "runtime/transport/mpi_feed.h"
#include "runtime/transport/slot_pair.h"

namespace sluice::transport {
namespace {

using detail::BatchHeader;
using detail::Deadline;
using detail::FeedTag;
using detail::feed_tag;

// NCCL ranks inside a channel's two-rank communicator.
constexpr int nccl_sender = 0;
constexpr int nccl_receiver = 1;

// Creating a communicator can take seconds by itself (NCCL's first initialisation in a process
// reads the topology and loads its plugins), so set-up waits at least this long whatever
// runtime.timeout_s says; every wait after set-up keeps timeout_s.
constexpr double min_setup_s = 30.0;
Deadline setup_deadline(const ChannelOptions& options) {
  return detail::deadline_after(std::max(options.timeout_s, min_setup_s));
}

void check_gpu_options(const ChannelOptions& options, const char* transport) {
  detail::check_options(options, transport, std::numeric_limits<size_t>::max() / 4);
  if (options.checksum) {
    throw ConfigError("feed channel \"" + options.name + "\" (" + transport +
                      "): checksum is for host transports; the batch is in device memory");
  }
}

class NcclSendChannel final : public detail::MpiFeedSender {
 public:
  NcclSendChannel(const MpiSession& session, int receiver, int device, const ChannelOptions& options)
      : MpiFeedSender(session, receiver, options, "nccl"), device_(device) {
    detail::DeviceGuard guard(device);
    stream_ = std::make_unique<detail::CudaStream>();
    sent_ = std::make_unique<detail::CudaEvent>();
    ncclUniqueId id;
    SLUICE_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    const Deadline deadline = setup_deadline(options);
    send_string(session, receiver, feed_tag(options.channel_id, FeedTag::setup),
                std::string(reinterpret_cast<const char*>(&id), sizeof(id)), deadline, "the NCCL unique id");
    comm_ = std::make_unique<detail::NcclComm>(id, 2, nccl_sender, deadline, names_.peer);
  }

  ~NcclSendChannel() override {
    try {
      detail::DeviceGuard guard(device_);
      comm_.reset();
      sent_.reset();
      stream_.reset();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("feed channel \"{}\": closing the nccl sender: {}", options_.name, error.what());
    }
  }

 private:
  bool host_memory() const override { return false; }
  void on_failure() override {
    if (comm_) comm_->abort();
  }

  void transfer(const void* data, size_t bytes, const BatchHeader& header, Deadline deadline) override {
    detail::DeviceGuard guard(device_);
    // The header first: the receiver needs the count for its ncclRecv.
    send_header(header);
    if (bytes > 0) {
      SLUICE_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, nccl_receiver, comm_->get(), stream_->get()), comm_->get());
    }
    bool recorded = false;
    wait_for(
        [&] {
          if (comm_->busy()) return false;  // still being enqueued (non-blocking communicator)
          if (!recorded) {
            SLUICE_CUDA_CHECK(cudaEventRecord(sent_->get(), stream_->get()));
            recorded = true;
          }
          return detail::event_done(sent_->get());
        },
        deadline, "the receiver to take batch " + std::to_string(header.sequence) + " (ncclSend)");
  }

  int device_;
  std::unique_ptr<detail::CudaStream> stream_;
  std::unique_ptr<detail::CudaEvent> sent_;
  std::unique_ptr<detail::NcclComm> comm_;
};

class NcclReceiveChannel final : public detail::MpiFeedReceiver {
 public:
  NcclReceiveChannel(const MpiSession& session, int sender, int device, const ChannelOptions& options)
      : MpiFeedReceiver(session, sender, options, "nccl"), device_(device), recorded_(static_cast<size_t>(options.slots)) {
    detail::DeviceGuard guard(device);
    slots_ = std::make_unique<detail::DeviceSlots>(options.slots, options.slot_bytes);
    stream_ = std::make_unique<detail::CudaStream>();
    received_.reserve(static_cast<size_t>(options.slots));
    for (int s = 0; s < options.slots; ++s) received_.emplace_back();
    const Deadline deadline = setup_deadline(options);
    const std::string id_bytes = receive_string(session, sender, feed_tag(options.channel_id, FeedTag::setup),
                                                deadline, "the NCCL unique id from the sender");
    ncclUniqueId id;
    if (id_bytes.size() != sizeof(id)) fail(failure_text("malformed NCCL unique id from the sender"));
    std::memcpy(&id, id_bytes.data(), sizeof(id));
    comm_ = std::make_unique<detail::NcclComm>(id, 2, nccl_receiver, deadline, names_.peer);
    grant_all();
  }

  ~NcclReceiveChannel() override {
    shut_down_for_destruction();
    try {
      detail::DeviceGuard guard(device_);
      comm_.reset();  // aborted already if a receive was outstanding
      stream_.reset();
      received_.clear();
      if (slots_must_leak_) slots_->leak();
      slots_.reset();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("feed channel \"{}\": closing the nccl receiver: {}", options_.name, error.what());
    }
  }

 private:
  struct PendingReceive {
    int slot;
    size_t bytes;
    bool issued = false;
  };

  void* slot_data(int slot) override { return slots_->slot(slot); }
  bool host_memory() const override { return false; }
  void on_failure() override {
    if (comm_) comm_->abort();
  }

  // Headers arrive in sequence order, the order of the sender's ncclSend calls: post the matching
  // ncclRecv now, so the transfer runs while the trainer works on earlier batches.
  void on_header(int slot, const BatchHeader& header) override {
    pending_.push_back(PendingReceive{slot, header.bytes});
    post_pending();
  }

  // Issues queued receives in order; a non-blocking communicator takes each call's work only
  // when it is no longer busy, and only then can an event mark its end on the stream.
  void post_pending() {
    detail::DeviceGuard guard(device_);
    while (!pending_.empty()) {
      PendingReceive& next = pending_.front();
      if (!next.issued) {
        if (next.bytes > 0) {
          SLUICE_NCCL_CHECK(ncclRecv(slots_->slot(next.slot), next.bytes, ncclUint8, nccl_sender, comm_->get(),
                                     stream_->get()),
                            comm_->get());
        }
        next.issued = true;
      }
      if (comm_->busy()) return;
      SLUICE_CUDA_CHECK(cudaEventRecord(received_[static_cast<size_t>(next.slot)].get(), stream_->get()));
      recorded_[static_cast<size_t>(next.slot)] = true;
      pending_.pop_front();
    }
  }

  bool payload_complete(int slot, const BatchHeader&, size_t*) override {
    post_pending();
    if (!recorded_[static_cast<size_t>(slot)]) return false;
    detail::DeviceGuard guard(device_);
    if (!detail::event_done(received_[static_cast<size_t>(slot)].get())) {
      (void)comm_->busy();  // surfaces a peer's failure reported asynchronously
      return false;
    }
    recorded_[static_cast<size_t>(slot)] = false;
    return true;
  }

  bool cancel_payload(int slot) noexcept override {
    // A posted ncclRecv whose sender is gone never ends: abort the communicator, which stops it.
    bool outstanding = !pending_.empty();
    if (recorded_[static_cast<size_t>(slot)]) {
      try {
        detail::DeviceGuard guard(device_);
        outstanding = outstanding || !detail::event_done(received_[static_cast<size_t>(slot)].get());
      } catch (const std::exception&) {
        outstanding = true;
      }
    }
    if (outstanding && comm_) comm_->abort();
    return true;
  }

  int device_;
  std::unique_ptr<detail::DeviceSlots> slots_;
  std::unique_ptr<detail::CudaStream> stream_;
  std::vector<detail::CudaEvent> received_;  // one per slot
  std::vector<bool> recorded_;
  std::deque<PendingReceive> pending_;
  std::unique_ptr<detail::NcclComm> comm_;
};

// One process, one GPU: a one-rank communicator that sends to itself. ncclSend and ncclRecv of
// a batch go in one group (NCCL's rule for send-to-self), on the sender's thread.
class NcclLoopbackSlots final : public detail::SlotStore {
 public:
  NcclLoopbackSlots(int device, const ChannelOptions& options) : device_(device) {
    detail::DeviceGuard guard(device);
    slots_ = std::make_unique<detail::DeviceSlots>(options.slots, options.slot_bytes);
    stream_ = std::make_unique<detail::CudaStream>();
    moved_ = std::make_unique<detail::CudaEvent>();
    ncclUniqueId id;
    SLUICE_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    comm_ = std::make_unique<detail::NcclComm>(id, 1, 0, setup_deadline(options), "itself");
  }

  ~NcclLoopbackSlots() override {
    try {
      detail::DeviceGuard guard(device_);
      comm_.reset();
      moved_.reset();
      stream_.reset();
      slots_.reset();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("nccl loopback channel: {}", error.what());
    }
  }

  void* slot(int index) override { return slots_->slot(index); }
  bool host_memory() const override { return false; }
  void leak() override { slots_->leak(); }

  void fill(int index, const void* data, size_t bytes, Deadline deadline) override {
    detail::DeviceGuard guard(device_);
    try {
      if (bytes > 0) {
        SLUICE_NCCL_CHECK(ncclGroupStart(), comm_->get());
        SLUICE_NCCL_CHECK(ncclSend(data, bytes, ncclUint8, 0, comm_->get(), stream_->get()), comm_->get());
        SLUICE_NCCL_CHECK(ncclRecv(slots_->slot(index), bytes, ncclUint8, 0, comm_->get(), stream_->get()),
                          comm_->get());
        SLUICE_NCCL_CHECK(ncclGroupEnd(), comm_->get());
      }
      detail::PollBackoff backoff;
      while (comm_->busy()) wait_or_abort(deadline, backoff);
      SLUICE_CUDA_CHECK(cudaEventRecord(moved_->get(), stream_->get()));
      while (!detail::event_done(moved_->get())) wait_or_abort(deadline, backoff);
    } catch (...) {
      comm_->abort();
      throw;
    }
  }

 private:
  static void wait_or_abort(Deadline deadline, detail::PollBackoff& backoff) {
    if (detail::Clock::now() > deadline) throw TransportError("timed out waiting for ncclSend/ncclRecv to itself");
    backoff.pause();
  }

  int device_;
  std::unique_ptr<detail::DeviceSlots> slots_;
  std::unique_ptr<detail::CudaStream> stream_;
  std::unique_ptr<detail::CudaEvent> moved_;
  std::unique_ptr<detail::NcclComm> comm_;
};

}  // namespace

std::unique_ptr<SendChannel> make_nccl_send_channel(const MpiSession& session, int receiver, int device,
                                                    const ChannelOptions& options) {
  check_gpu_options(options, "nccl");
  return std::make_unique<NcclSendChannel>(session, receiver, device, options);
}

std::unique_ptr<ReceiveChannel> make_nccl_receive_channel(const MpiSession& session, int sender, int device,
                                                          const ChannelOptions& options) {
  check_gpu_options(options, "nccl");
  return std::make_unique<NcclReceiveChannel>(session, sender, device, options);
}

ChannelPair make_nccl_loopback_channel_pair(int device, const ChannelOptions& options) {
  check_gpu_options(options, "nccl loopback");
  return detail::make_slot_pair(std::make_unique<NcclLoopbackSlots>(device, options), options, "nccl loopback");
}

}  // namespace sluice::transport

#endif  // SLUICE_HAVE_NCCL
