#pragma once
// The feed suite across two MPI ranks: rank 0 is the sender, rank 1 the receiver. Used with the
// MPI test main (mpi_test_main.cpp), which makes the MpiSession as in production
// (MPI_THREAD_MULTIPLE and the heartbeat; the feed makes its MPI calls on the calling thread).
#include <functional>
#include <memory>

#include "common/mpi_session.h"
#include "feed_channel_suite.h"

namespace sluice::transport::testing {

// The session of the MPI test main.
const MpiSession& test_session();
void set_test_session(const MpiSession* session);

struct MpiTransport {
  std::function<std::unique_ptr<SendChannel>(const MpiSession&, int receiver, const ChannelOptions&)> make_sender;
  std::function<std::unique_ptr<ReceiveChannel>(const MpiSession&, int sender, const ChannelOptions&)> make_receiver;
  // Host memory by default; GPU transports stage into and fetch from device memory.
  std::function<const void*(const std::vector<uint8_t>&)> stage;
  std::function<std::vector<uint8_t>(const ReceivedBatch&)> fetch;
  std::function<std::string()> skip_reason;
  bool supports_checksum = true;
  // Whether the ranks meet after each test (off where a test kills one of them).
  bool meet_after_test = true;
};

class MpiHarness final : public FeedHarness {
 public:
  explicit MpiHarness(MpiTransport transport);
  std::string skip_reason() const override;
  bool supports_checksum() const override { return transport_.supports_checksum; }
  // Both ranks call run() for the same test; each gets a fresh channel_id, so that nothing a
  // test leaves behind (an unmatched credit, a cancelled message) reaches the next one.
  void run(ChannelOptions options, const std::function<void(SenderSide&)>& sender,
           const std::function<void(ReceiverSide&)>& receiver) override;

 private:
  MpiTransport transport_;
  std::vector<uint8_t> staged_;
};

}  // namespace sluice::transport::testing
