// The feed suite on the nccl transport inside one process (a one-rank communicator sending to
// itself, the sender on a thread). Skips without a GPU. Label gpu.
#include "common/error.h"
#include "feed_channel_suite.h"
#include "gpu_memory.h"
#include "runtime/transport/cuda_ipc_channel.h"
#include "runtime/transport/nccl_channel.h"

namespace sluice::transport::testing {
namespace {

class NcclLoopbackHarness final : public FeedHarness {
 public:
  std::string skip_reason() const override {
#if !SLUICE_HAVE_NCCL
    return "this build has no NCCL";
#else
    return gpu_skip_reason(1);
#endif
  }
  bool supports_checksum() const override { return false; }
  void run(ChannelOptions options, const std::function<void(SenderSide&)>& sender,
           const std::function<void(ReceiverSide&)>& receiver) override {
    auto pair = make_nccl_loopback_channel_pair(0, options);
    run_in_process(
        std::move(pair.sender), std::move(pair.receiver),
        [this](const std::vector<uint8_t>& bytes) { return staging_.stage(bytes); }, fetch_from_device, sender,
        receiver);
  }

 private:
  DeviceStaging staging_{0};
};

INSTANTIATE_TEST_SUITE_P(Gpu, FeedChannelSuite,
                         ::testing::Values(FeedTransport{"nccl_loopback",
                                                         [] { return std::make_unique<NcclLoopbackHarness>(); }}),
                         transport_name);

TEST(GpuChannels, RefuseChecksums) {
  if (const auto reason = gpu_skip_reason(1); !reason.empty()) GTEST_SKIP() << reason;
  ChannelOptions options;
  options.slot_bytes = 1024;
  options.checksum = true;
  EXPECT_THROW(make_nccl_loopback_channel_pair(0, options), ConfigError);
}

}  // namespace
}  // namespace sluice::transport::testing
