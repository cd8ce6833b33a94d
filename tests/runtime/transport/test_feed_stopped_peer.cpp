// A peer rank stopped for good (SIGSTOP from the other rank, i.e. from outside the stopped
// process) is named by the waiting endpoint within 2 x the deadline, as "gave no sign of life"
// (the heartbeat, LIVENESS in common/heartbeat.h). The waiting rank then continues its peer
// (SIGCONT) so that both ranks end the test together. The slow-but-alive cases are in the
// suite (feed_channel_suite.cpp): a peer slower than the deadline is waited for.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/error.h"
#include "mpi_harness.h"
#include "runtime/transport/mpi_channel.h"

namespace sluice::transport::testing {
namespace {

// The suite comes with the MPI test main; its tests run in test_feed_mpi.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FeedChannelSuite);

constexpr double deadline_s = 1.0;
constexpr size_t slot_bytes = 1 << 20;  // rendezvous-sized: the stop catches a transfer half done
constexpr int pid_tag = 0x3000;

ChannelOptions options() {
  ChannelOptions options;
  options.name = "test feed";
  options.slot_bytes = slot_bytes;
  options.timeout_s = deadline_s;
  return options;
}

std::unique_ptr<FeedHarness> harness() {
  MpiTransport transport;
  transport.make_sender = make_mpi_send_channel;
  transport.make_receiver = make_mpi_receive_channel;
  return std::make_unique<MpiHarness>(std::move(transport));
}

void tell_pid(int peer) {
  send_string(test_session(), peer, pid_tag, std::to_string(::getpid()), deadline_after(30), "the pid");
}

pid_t peer_pid(int peer) {
  return static_cast<pid_t>(std::stol(receive_string(test_session(), peer, pid_tag, deadline_after(30), "the pid")));
}

// Runs `wait` (which must throw) with `peer` stopped; returns the error and the seconds it took.
std::pair<std::string, double> with_peer_stopped(pid_t peer, const std::function<void()>& wait) {
  EXPECT_EQ(::kill(peer, SIGSTOP), 0);
  const auto start = Clock::now();
  std::string error;
  try {
    wait();
  } catch (const TransportError& e) {
    error = e.what();
  }
  const double waited = seconds_since(start);
  EXPECT_EQ(::kill(peer, SIGCONT), 0);
  std::printf("after %.2f s: %s\n", waited, error.c_str());
  return {error, waited};
}

TEST(FeedStoppedPeer, ReceiverNamesAStoppedSender) {
  auto feed = harness();
  if (!feed->skip_reason().empty()) GTEST_SKIP() << feed->skip_reason();
  feed->run(
      options(),
      [&](SenderSide& side) {
        std::vector<uint8_t> batch(64, 7);
        for (int s = 0; s < 2; ++s) side.channel->send(side.stage(batch), batch.size());
        tell_pid(1);
        side.barrier();  // stopped in here by the receiver, continued after its error
      },
      [&](ReceiverSide& side) {
        for (int s = 0; s < 2; ++s) side.channel->release(*side.channel->receive());
        const auto [error, waited] = with_peer_stopped(peer_pid(0), [&] { side.channel->receive(); });
        EXPECT_NE(error, "") << "receive() from a stopped sender did not fail";
        EXPECT_LE(waited, 2 * deadline_s);
        EXPECT_NE(error.find(side.peer + " gave no sign of life"), std::string::npos) << error;
        EXPECT_NE(error.find("batch 2"), std::string::npos) << error;
        EXPECT_NE(error.find("last sequence received: 1"), std::string::npos) << error;
        side.barrier();
      });
}

TEST(FeedStoppedPeer, SenderNamesAStoppedReceiver) {
  auto feed = harness();
  if (!feed->skip_reason().empty()) GTEST_SKIP() << feed->skip_reason();
  feed->run(
      options(),
      [&](SenderSide& side) {
        std::vector<uint8_t> batch(slot_bytes, 7);
        side.channel->send(side.stage(batch), batch.size());
        const auto [error, waited] = with_peer_stopped(peer_pid(1), [&] {
          for (int s = 0; s < 10; ++s) side.channel->send(side.stage(batch), batch.size());
        });
        EXPECT_NE(error, "") << "send() to a stopped receiver did not fail";
        EXPECT_LE(waited, 2 * deadline_s);
        EXPECT_NE(error.find(side.peer + " gave no sign of life"), std::string::npos) << error;
        side.barrier();
      },
      [&](ReceiverSide& side) {
        side.channel->release(*side.channel->receive());
        tell_pid(0);
        side.barrier();  // stopped in here by the sender, continued after its error
      });
}

}  // namespace
}  // namespace sluice::transport::testing
