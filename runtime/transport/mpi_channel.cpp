#include "runtime/transport/mpi_channel.h"

#include <climits>
#include <vector>

#include "runtime/transport/mpi_feed.h"
#include "runtime/transport/progress_pump.h"

namespace sluice::transport {
namespace {

using detail::BatchHeader;
using detail::Clock;
using detail::Deadline;
using detail::FeedTag;
using detail::feed_tag;

// One MPI message of MPI_BYTE carries a batch: its count is an int.
constexpr size_t max_slot_bytes = static_cast<size_t>(INT_MAX);

class MpiSendChannel final : public detail::MpiFeedSender {
 public:
  MpiSendChannel(const MpiSession& session, int receiver, const ChannelOptions& options)
      : MpiFeedSender(session, receiver, options, "mpi") {}

 private:
  void transfer(const void* data, size_t bytes, const BatchHeader& header, Deadline deadline) override {
    send_header(header);
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer_,
                        feed_tag(options_.channel_id, FeedTag::payload), comm_, &request),
              "MPI_Isend(batch)");
    try {
      wait_for(
          [&] {
            int done = 0;
            check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(batch)");
            return done != 0;
          },
          deadline, "the receiver to take batch " + std::to_string(header.sequence), bytes);
    } catch (...) {
      // MPI may still read `data` until the run ends; nothing here waits for it.
      if (request != MPI_REQUEST_NULL) {
        check_mpi_or_warn(MPI_Cancel(&request), "MPI_Cancel(batch)");
        check_mpi_or_warn(MPI_Request_free(&request), "MPI_Request_free(batch)");
      }
      throw;
    }
  }
};

class MpiReceiveChannel final : public detail::MpiFeedReceiver {
 public:
  MpiReceiveChannel(const MpiSession& session, int sender, const ChannelOptions& options)
      : MpiFeedReceiver(session, sender, options, "mpi"),
        slots_(options.slots, options.slot_bytes),
        payloads_(static_cast<size_t>(options.slots)) {
    try {
      grant_all();
      pump_.start();
    } catch (...) {
      shut_down_for_destruction();  // cancels the receives posted so far, into slots_
      if (slots_must_leak_) slots_.leak();
      throw;
    }
  }

  ~MpiReceiveChannel() override {
    shut_down_for_destruction();
    if (slots_must_leak_) slots_.leak();
  }

 private:
  struct Payload {
    MPI_Request request = MPI_REQUEST_NULL;
    bool done = false;
    size_t bytes = 0;
  };

  void* slot_data(int slot) override { return slots_.slot(slot); }

  void on_grant(int slot) override {
    Payload& p = payloads_[static_cast<size_t>(slot)];
    p = Payload{};
    check_mpi(MPI_Irecv(slots_.slot(slot), static_cast<int>(options_.slot_bytes), MPI_BYTE, peer_,
                        feed_tag(options_.channel_id, FeedTag::payload), comm_, &p.request),
              "MPI_Irecv(batch)");
    pump_.nudge();
  }

  void before_shut_down() noexcept override { pump_.stop(); }

  bool payload_complete(int slot, const BatchHeader&, size_t* bytes_received) override {
    Payload& p = payloads_[static_cast<size_t>(slot)];
    if (!p.done) {
      int done = 0;
      MPI_Status status;
      check_mpi(MPI_Test(&p.request, &done, &status), "MPI_Test(batch)");
      if (!done) return false;
      int count = 0;
      check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
      p.done = true;
      p.bytes = static_cast<size_t>(count);
    }
    *bytes_received = p.bytes;
    return true;
  }

  bool cancel_payload(int slot) noexcept override {
    Payload& p = payloads_[static_cast<size_t>(slot)];
    if (p.request == MPI_REQUEST_NULL) return true;
    check_mpi_or_warn(MPI_Cancel(&p.request), "MPI_Cancel(batch payload)");
    const Deadline deadline = detail::deadline_after(0.5);
    detail::PollBackoff backoff;
    int done = 0;
    while (check_mpi_or_warn(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test(batch payload)") && !done &&
           Clock::now() < deadline) {
      backoff.pause();
    }
    if (done) return true;
    check_mpi_or_warn(MPI_Request_free(&p.request), "MPI_Request_free(batch payload)");  // a transfer in progress from a dead peer: the slot must leak
    return false;
  }

  detail::HostSlots slots_;
  std::vector<Payload> payloads_;
  // Moves incoming batches while the trainer computes (progress_pump.h); stopped at shut-down.
  detail::ProgressPump pump_;
};

}  // namespace

std::unique_ptr<SendChannel> make_mpi_send_channel(const MpiSession& session, int receiver,
                                                   const ChannelOptions& options) {
  detail::check_options(options, "mpi", max_slot_bytes);
  return std::make_unique<MpiSendChannel>(session, receiver, options);
}

std::unique_ptr<ReceiveChannel> make_mpi_receive_channel(const MpiSession& session, int sender,
                                                         const ChannelOptions& options) {
  detail::check_options(options, "mpi", max_slot_bytes);
  return std::make_unique<MpiReceiveChannel>(session, sender, options);
}

}  // namespace sluice::transport
