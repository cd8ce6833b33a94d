// The two-rank GPU transports' harnesses (cuda_ipc, nccl), shared by the suite and the peer-exit
// test.
#include "gpu_memory.h"
#include "mpi_harness.h"
#include "runtime/transport/cuda_ipc_channel.h"
#include "runtime/transport/nccl_channel.h"

namespace sluice::transport::testing {
namespace {

// A rank's GPU: its local rank modulo the visible devices (the role plan's rule).
int my_device() {
  const int count = gpu_count();
  return count > 0 ? test_session().local_rank() % count : 0;
}

MpiTransport gpu_transport(int devices) {
  MpiTransport transport;
  auto staging = std::make_shared<std::unique_ptr<DeviceStaging>>();
  transport.stage = [staging](const std::vector<uint8_t>& bytes) {
    if (!*staging) *staging = std::make_unique<DeviceStaging>(my_device());
    return (*staging)->stage(bytes);
  };
  transport.fetch = fetch_from_device;
  transport.skip_reason = [devices] { return gpu_skip_reason(devices); };
  transport.supports_checksum = false;
  return transport;
}

}  // namespace

std::unique_ptr<FeedHarness> cuda_ipc_harness(bool meet_after_test) {
  MpiTransport transport = gpu_transport(1);
  transport.meet_after_test = meet_after_test;
  transport.make_sender = [](const MpiSession& session, int peer, const ChannelOptions& options) {
    return make_cuda_ipc_send_channel(session, peer, my_device(), options);
  };
  transport.make_receiver = [](const MpiSession& session, int peer, const ChannelOptions& options) {
    return make_cuda_ipc_receive_channel(session, peer, my_device(), options);
  };
  return std::make_unique<MpiHarness>(std::move(transport));
}

std::unique_ptr<FeedHarness> nccl_harness(bool meet_after_test) {
  MpiTransport transport = gpu_transport(2);
  transport.meet_after_test = meet_after_test;
#if !SLUICE_HAVE_NCCL
  transport.skip_reason = [] { return std::string("this build has no NCCL"); };
#endif
  transport.make_sender = [](const MpiSession& session, int peer, const ChannelOptions& options) {
    return make_nccl_send_channel(session, peer, my_device(), options);
  };
  transport.make_receiver = [](const MpiSession& session, int peer, const ChannelOptions& options) {
    return make_nccl_receive_channel(session, peer, my_device(), options);
  };
  return std::make_unique<MpiHarness>(std::move(transport));
}

}  // namespace sluice::transport::testing
