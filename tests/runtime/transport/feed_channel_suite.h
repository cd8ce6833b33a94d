#pragma once
// The one test suite every feed transport passes (feed_channel_suite.cpp). A transport joins by
// providing a FeedHarness and instantiating FeedChannelSuite in its test executable:
//   inproc               test_feed_inproc.cpp     (threads, one process)
//   mpi                  test_feed_mpi.cpp        (mpirun -np 2, label mpi)
//   nccl loopback        test_feed_gpu.cpp        (threads, one GPU, label gpu)
//   cuda_ipc, nccl       test_feed_gpu_mpi.cpp    (mpirun -np 2, labels gpu mpi)
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/transport/feed_channel.h"

namespace sluice::transport::testing {

// What the sending side of a test gets.
struct SenderSide {
  std::unique_ptr<SendChannel> channel;  // reset() it to destroy the endpoint mid-test
  std::string peer;                      // how this end's errors must name the receiver
  std::function<void()> barrier;         // meets the receiving side (throws if it never comes)
  // Puts host bytes where send() takes them from (device memory for GPU transports).
  std::function<const void*(const std::vector<uint8_t>&)> stage;
};

// What the receiving side of a test gets.
struct ReceiverSide {
  std::unique_ptr<ReceiveChannel> channel;
  std::string peer;
  std::function<void()> barrier;
  // Copies a received batch to host memory.
  std::function<std::vector<uint8_t>(const ReceivedBatch&)> fetch;
};

class FeedHarness {
 public:
  virtual ~FeedHarness() = default;
  // Why the transport cannot run here (no GPU, not two ranks), or empty.
  virtual std::string skip_reason() const { return ""; }
  virtual bool supports_checksum() const { return true; }
  // Makes a channel from `options` and runs both sides concurrently: an in-process harness runs
  // the sender on a second thread, an MPI harness runs the sender on rank 0 and the receiver on
  // rank 1. An exception escaping a side fails the test; a side that returns lets the other's
  // barrier() fail at once (in-process) or at its deadline (MPI).
  virtual void run(ChannelOptions options, const std::function<void(SenderSide&)>& sender,
                   const std::function<void(ReceiverSide&)>& receiver) = 0;
};

struct FeedTransport {
  std::string name;
  std::function<std::unique_ptr<FeedHarness>()> make;
};

// gtest prints a parameter with this (instead of its bytes).
inline void PrintTo(const FeedTransport& transport, std::ostream* out) { *out << transport.name; }

inline std::string transport_name(const ::testing::TestParamInfo<FeedTransport>& info) {
  return info.param.name;
}

class FeedChannelSuite : public ::testing::TestWithParam<FeedTransport> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make();
    const std::string reason = harness_->skip_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  std::unique_ptr<FeedHarness> harness_;
};

// Runs both sides of an in-process pair (the inproc and nccl loopback harnesses): the sender on
// a new thread, the receiver on this one.
void run_in_process(std::unique_ptr<SendChannel> sender_channel, std::unique_ptr<ReceiveChannel> receiver_channel,
                    const std::function<const void*(const std::vector<uint8_t>&)>& stage,
                    const std::function<std::vector<uint8_t>(const ReceivedBatch&)>& fetch,
                    const std::function<void(SenderSide&)>& sender,
                    const std::function<void(ReceiverSide&)>& receiver);

}  // namespace sluice::transport::testing
