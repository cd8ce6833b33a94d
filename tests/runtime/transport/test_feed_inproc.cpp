// The feed suite on the inproc transport: the sender on a thread, the receiver on the test's.
#include <cstring>

#include "feed_channel_suite.h"
#include "runtime/transport/inproc_channel.h"
#include "common/error.h"

namespace sluice::transport::testing {
namespace {

class InprocHarness final : public FeedHarness {
 public:
  void run(ChannelOptions options, const std::function<void(SenderSide&)>& sender,
           const std::function<void(ReceiverSide&)>& receiver) override {
    auto pair = make_inproc_channel_pair(options);
    run_in_process(
        std::move(pair.sender), std::move(pair.receiver),
        [this](const std::vector<uint8_t>& bytes) {
          staged_ = bytes;
          return static_cast<const void*>(staged_.data());
        },
        [](const ReceivedBatch& batch) {
          const auto* data = static_cast<const uint8_t*>(batch.data);
          return std::vector<uint8_t>(data, data + batch.bytes);
        },
        sender, receiver);
  }

 private:
  std::vector<uint8_t> staged_;
};

INSTANTIATE_TEST_SUITE_P(Inproc, FeedChannelSuite,
                         ::testing::Values(FeedTransport{"inproc", [] { return std::make_unique<InprocHarness>(); }}),
                         transport_name);

TEST(InprocChannel, RefusesOptionsOutOfRange) {
  ChannelOptions options;
  options.slot_bytes = 0;
  EXPECT_THROW(make_inproc_channel_pair(options), ConfigError);
  options.slot_bytes = 1024;
  options.slots = 0;
  EXPECT_THROW(make_inproc_channel_pair(options), ConfigError);
  options.slots = 3;
  options.timeout_s = 0;
  EXPECT_THROW(make_inproc_channel_pair(options), ConfigError);
}

}  // namespace
}  // namespace sluice::transport::testing
