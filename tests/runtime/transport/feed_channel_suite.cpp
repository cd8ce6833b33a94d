// The feed protocol's test suite (runtime/transport/feed_channel.h), run by every transport.
// Deadlines are short (1 s) where a peer is slower than the deadline on purpose (it must be
// waited for: a deadline measures whether the peer is alive, not how long it takes), long (20 s)
// elsewhere; the only timing checks are the protocol's own: a slow peer's wait lasts as long as
// the peer takes, a close or abort unblocks a waiter well before its deadline. Stopped and dead
// peers: test_feed_stopped_peer.cpp and test_feed_peer_exit.cpp (two ranks).
#include "feed_channel_suite.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/clock.h"
#include "common/error.h"

namespace sluice::transport::testing {
namespace {


constexpr double short_deadline_s = 1.0;
constexpr double long_deadline_s = 20.0;


// The bytes of batch `sequence`: differ in every position and between batches.
std::vector<uint8_t> pattern(uint64_t sequence, size_t bytes) {
  std::vector<uint8_t> data(bytes);
  uint32_t state = static_cast<uint32_t>(sequence) * 2654435761u + 12345u;
  for (size_t i = 0; i < bytes; ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = static_cast<uint8_t>(state >> 24);
  }
  return data;
}

// Batch sizes: empty, one byte, exactly a slot, then a spread over [1, slot_bytes].
size_t batch_size(uint64_t sequence, size_t slot_bytes) {
  if (sequence == 0) return 0;
  if (sequence == 1) return 1;
  if (sequence == 2) return slot_bytes;
  const uint64_t mixed = (sequence * 0x9E3779B97F4A7C15ull) >> 17;
  if (sequence % 4 == 0) return 1 + mixed % 4096;  // small, eager-sized batches too
  return 1 + mixed % slot_bytes;
}

ChannelOptions options_for(const FeedHarness& harness, size_t slot_bytes, double timeout_s) {
  ChannelOptions options;
  options.name = "test feed";
  options.slot_bytes = slot_bytes;
  options.timeout_s = timeout_s;
  options.checksum = harness.supports_checksum();
  return options;
}

std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const TransportError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

// Bytes arrive intact and in order over many batches of varying sizes, released in a different
// order than received; stats count every batch and byte.
TEST_P(FeedChannelSuite, BytesArriveIntactAndInOrder) {
  constexpr uint64_t batches = 300;
  constexpr size_t slot_bytes = 256 * 1024;
  uint64_t total_bytes = 0;
  for (uint64_t s = 0; s < batches; ++s) total_bytes += batch_size(s, slot_bytes);
  harness_->run(
      options_for(*harness_, slot_bytes, long_deadline_s),
      [&](SenderSide& side) {
        for (uint64_t s = 0; s < batches; ++s) {
          side.channel->send(side.stage(pattern(s, batch_size(s, slot_bytes))), batch_size(s, slot_bytes));
        }
        side.channel->close();
        EXPECT_EQ(side.channel->stats().batches, batches);
        EXPECT_EQ(side.channel->stats().bytes, total_bytes);
      },
      [&](ReceiverSide& side) {
        std::vector<ReceivedBatch> held;  // up to 2, released newest first
        uint64_t expected = 0;
        while (auto batch = side.channel->receive()) {
          ASSERT_EQ(batch->sequence, expected);
          ASSERT_EQ(batch->bytes, batch_size(expected, slot_bytes));
          ASSERT_TRUE(side.fetch(*batch) == pattern(expected, batch->bytes)) << "batch " << expected;
          ++expected;
          held.push_back(*batch);
          if (held.size() == 2) {
            side.channel->release(held[1]);
            side.channel->release(held[0]);
            held.clear();
          }
        }
        for (const auto& batch : held) side.channel->release(batch);
        EXPECT_EQ(expected, batches);
        EXPECT_EQ(side.channel->stats().batches, batches);
        EXPECT_EQ(side.channel->stats().bytes, total_bytes);
      });
}

// Credits are enforced: with all K slots held by the trainer, the sender's K+1-th send waits for
// a credit. The trainer holds them for longer than the deadline: a slow but live receiver is
// waited for (LIVENESS in common/heartbeat.h), so the send succeeds once a slot comes back.
TEST_P(FeedChannelSuite, SenderWaitsForACreditWhileTheReceiverHoldsEverySlot) {
  constexpr size_t slot_bytes = 64 * 1024;
  const ChannelOptions options = options_for(*harness_, slot_bytes, short_deadline_s);
  const auto hold = std::chrono::duration<double>(1.5 * options.timeout_s);
  harness_->run(
      options,
      [&](SenderSide& side) {
        for (int s = 0; s < options.slots; ++s) side.channel->send(side.stage(pattern(s, 1000)), 1000);
        const auto start = Clock::now();
        const std::string error = message_of([&] { side.channel->send(side.stage(pattern(9, 1000)), 1000); });
        const double waited = seconds_since(start);
        EXPECT_EQ(error, "") << "a receiver slower than the deadline failed the sender";
        // It could not send before a slot came back: the receiver held them all that long.
        EXPECT_GE(waited, hold.count() * 0.9);
        side.channel->close();
        EXPECT_EQ(side.channel->stats().batches, static_cast<uint64_t>(options.slots + 1));
      },
      [&](ReceiverSide& side) {
        std::vector<ReceivedBatch> held;
        for (int s = 0; s < options.slots; ++s) {
          auto batch = side.channel->receive();
          ASSERT_TRUE(batch.has_value());
          EXPECT_EQ(batch->sequence, static_cast<uint64_t>(s));
          held.push_back(*batch);
        }
        std::this_thread::sleep_for(hold);  // a trainer step longer than the deadline
        for (const auto& batch : held) side.channel->release(batch);
        auto last = side.channel->receive();
        ASSERT_TRUE(last.has_value());
        EXPECT_EQ(last->sequence, static_cast<uint64_t>(options.slots));
        EXPECT_TRUE(side.fetch(*last) == pattern(9, 1000));
        side.channel->release(*last);
        EXPECT_FALSE(side.channel->receive().has_value());
      });
}

// End of stream is explicit: the receiver gets every batch, then nullopt (again on every call);
// close() is idempotent and send() after it throws.
TEST_P(FeedChannelSuite, EndOfStreamAfterTheLastBatch) {
  constexpr size_t slot_bytes = 4096;
  harness_->run(
      options_for(*harness_, slot_bytes, long_deadline_s),
      [&](SenderSide& side) {
        for (uint64_t s = 0; s < 5; ++s) side.channel->send(side.stage(pattern(s, 100)), 100);
        side.channel->close();
        side.channel->close();
        EXPECT_THROW(side.channel->send(side.stage(pattern(5, 100)), 100), TransportError);
      },
      [&](ReceiverSide& side) {
        for (uint64_t s = 0; s < 5; ++s) {
          auto batch = side.channel->receive();
          ASSERT_TRUE(batch.has_value());
          EXPECT_EQ(batch->sequence, s);
          side.channel->release(*batch);
        }
        EXPECT_FALSE(side.channel->receive().has_value());
        EXPECT_FALSE(side.channel->receive().has_value());
        side.channel->close();
      });
}

TEST_P(FeedChannelSuite, EmptyStreamEndsAtOnce) {
  harness_->run(
      options_for(*harness_, 4096, long_deadline_s), [&](SenderSide& side) { side.channel->close(); },
      [&](ReceiverSide& side) {
        const auto start = Clock::now();
        EXPECT_FALSE(side.channel->receive().has_value());
        EXPECT_LT(seconds_since(start), long_deadline_s / 2);
      });
}

// A receiver waits for a sender slower than the deadline (a data rank reading a slow disk): the
// sender is alive, so nothing fails. A stopped or dead sender is named instead
// (test_feed_stopped_peer.cpp, test_feed_peer_exit.cpp).
TEST_P(FeedChannelSuite, ReceiverWaitsForASenderSlowerThanTheDeadline) {
  const ChannelOptions options = options_for(*harness_, 4096, short_deadline_s);
  const auto pause = std::chrono::duration<double>(1.5 * options.timeout_s);
  harness_->run(
      options,
      [&](SenderSide& side) {
        for (uint64_t s = 0; s < 2; ++s) side.channel->send(side.stage(pattern(s, 64)), 64);
        std::this_thread::sleep_for(pause);
        side.channel->send(side.stage(pattern(2, 64)), 64);
        side.channel->close();
      },
      [&](ReceiverSide& side) {
        for (int s = 0; s < 2; ++s) {
          auto batch = side.channel->receive();
          ASSERT_TRUE(batch.has_value());
          side.channel->release(*batch);
        }
        const auto start = Clock::now();
        std::optional<ReceivedBatch> batch;
        const std::string error = message_of([&] { batch = side.channel->receive(); });
        EXPECT_EQ(error, "") << "a sender slower than the deadline failed the receiver";
        ASSERT_TRUE(batch.has_value());
        EXPECT_EQ(batch->sequence, 2u);
        EXPECT_GE(seconds_since(start), pause.count() * 0.5) << "the sender's pause did not happen";
        side.channel->release(*batch);
        EXPECT_FALSE(side.channel->receive().has_value());
      });
}

// A sender faster than its receiver just waits for credits: nothing is lost or reordered, and
// the waiting shows up in the sender's stats.
TEST_P(FeedChannelSuite, FastSenderWaitsForASlowReceiver) {
  constexpr uint64_t batches = 12;
  constexpr auto step = std::chrono::milliseconds(25);
  harness_->run(
      options_for(*harness_, 8192, long_deadline_s),
      [&](SenderSide& side) {
        for (uint64_t s = 0; s < batches; ++s) side.channel->send(side.stage(pattern(s, 8192)), 8192);
        side.channel->close();
        // 9 of the 12 sends wait for a 25 ms step each: at least ~0.2 s blocked in send(). (In
        // the mpi transport part of it is transfer_s: a batch above MPI's eager size moves only
        // while the receiving thread is inside a channel call; see feed_channel.h.)
        const ChannelStats stats = side.channel->stats();
        EXPECT_GT(stats.wait_s + stats.transfer_s, 0.1);
      },
      [&](ReceiverSide& side) {
        uint64_t expected = 0;
        while (auto batch = side.channel->receive()) {
          EXPECT_EQ(batch->sequence, expected);
          EXPECT_TRUE(side.fetch(*batch) == pattern(expected, 8192)) << "batch " << expected;
          ++expected;
          std::this_thread::sleep_for(step);  // the trainer's step
          side.channel->release(*batch);
        }
        EXPECT_EQ(expected, batches);
      });
}

// The receiver's close() (shutdown) makes a sender waiting for a credit fail at once, and the
// sender knows it was the receiver's choice (receiver_closed).
TEST_P(FeedChannelSuite, ReceiverShutdownUnblocksAWaitingSender) {
  const ChannelOptions options = options_for(*harness_, 4096, long_deadline_s);
  harness_->run(
      options,
      [&](SenderSide& side) {
        for (int s = 0; s < options.slots; ++s) side.channel->send(side.stage(pattern(s, 64)), 64);
        EXPECT_FALSE(side.channel->receiver_closed());
        side.barrier();
        const auto start = Clock::now();
        const std::string error = message_of([&] { side.channel->send(side.stage(pattern(9, 64)), 64); });
        EXPECT_LT(seconds_since(start), options.timeout_s / 4);
        EXPECT_NE(error.find("shut the channel down"), std::string::npos) << error;
        EXPECT_NE(error.find(side.peer), std::string::npos) << error;
        EXPECT_TRUE(side.channel->receiver_closed());
      },
      [&](ReceiverSide& side) {
        for (int s = 0; s < options.slots; ++s) ASSERT_TRUE(side.channel->receive().has_value());
        side.barrier();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the sender is waiting now
        side.channel->close();
      });
}

// A receiver destroyed mid-stream (no close(): a failed model rank) makes a waiting sender fail at
// once, and that is not a close.
TEST_P(FeedChannelSuite, ReceiverAbortIsNotAClose) {
  const ChannelOptions options = options_for(*harness_, 4096, long_deadline_s);
  harness_->run(
      options,
      [&](SenderSide& side) {
        for (int s = 0; s < options.slots; ++s) side.channel->send(side.stage(pattern(s, 64)), 64);
        side.barrier();
        const std::string error = message_of([&] { side.channel->send(side.stage(pattern(9, 64)), 64); });
        EXPECT_NE(error.find("aborted"), std::string::npos) << error;
        EXPECT_FALSE(side.channel->receiver_closed());
      },
      [&](ReceiverSide& side) {
        for (int s = 0; s < options.slots; ++s) ASSERT_TRUE(side.channel->receive().has_value());
        side.barrier();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the sender is waiting now
        side.channel.reset();
      });
}

// A sender destroyed mid-stream (no close()) makes a waiting receiver fail at once.
TEST_P(FeedChannelSuite, SenderAbortUnblocksAWaitingReceiver) {
  const ChannelOptions options = options_for(*harness_, 4096, long_deadline_s);
  harness_->run(
      options,
      [&](SenderSide& side) {
        side.channel->send(side.stage(pattern(0, 64)), 64);
        side.barrier();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the receiver is waiting now
        side.channel.reset();
      },
      [&](ReceiverSide& side) {
        auto batch = side.channel->receive();
        ASSERT_TRUE(batch.has_value());
        side.channel->release(*batch);
        side.barrier();
        const auto start = Clock::now();
        const std::string error = message_of([&] { side.channel->receive(); });
        EXPECT_LT(seconds_since(start), options.timeout_s / 4);
        EXPECT_NE(error.find("aborted"), std::string::npos) << error;
        EXPECT_NE(error.find(side.peer), std::string::npos) << error;
      });
}

// Misuse that the channel refuses without failing: a batch larger than a slot, a release of a
// slot not held.
TEST_P(FeedChannelSuite, RefusesOversizeBatchesAndStrayReleases) {
  constexpr size_t slot_bytes = 4096;
  harness_->run(
      options_for(*harness_, slot_bytes, long_deadline_s),
      [&](SenderSide& side) {
        const std::string error =
            message_of([&] { side.channel->send(side.stage(pattern(0, slot_bytes + 1)), slot_bytes + 1); });
        EXPECT_NE(error.find("exceeds slot_bytes"), std::string::npos) << error;
        side.channel->send(side.stage(pattern(0, slot_bytes)), slot_bytes);
        side.channel->close();
      },
      [&](ReceiverSide& side) {
        auto batch = side.channel->receive();
        ASSERT_TRUE(batch.has_value());
        EXPECT_EQ(batch->bytes, slot_bytes);
        EXPECT_TRUE(side.fetch(*batch) == pattern(0, slot_bytes));
        side.channel->release(*batch);
        EXPECT_THROW(side.channel->release(*batch), TransportError);
        EXPECT_FALSE(side.channel->receive().has_value());
      });
}

// ---------------------------------------------------------------------------------------------

namespace {

// A two-party barrier whose wait fails at once when the other party has left.
class PairBarrier {
 public:
  void arrive(int party) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (left_[1 - party]) throw std::runtime_error("barrier: the other side finished without arriving");
    const uint64_t generation = generation_;
    if (++arrived_ == 2) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    const bool met = changed_.wait_for(lock, std::chrono::seconds(60), [&] {
      return generation_ != generation || left_[1 - party];
    });
    if (generation_ != generation) return;
    --arrived_;
    throw std::runtime_error(met ? "barrier: the other side finished without arriving"
                                 : "barrier: the other side did not arrive within 60 s");
  }
  void leave(int party) {
    std::lock_guard<std::mutex> lock(mutex_);
    left_[party] = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool left_[2] = {false, false};
};

}  // namespace

void run_in_process(std::unique_ptr<SendChannel> sender_channel, std::unique_ptr<ReceiveChannel> receiver_channel,
                    const std::function<const void*(const std::vector<uint8_t>&)>& stage,
                    const std::function<std::vector<uint8_t>(const ReceivedBatch&)>& fetch,
                    const std::function<void(SenderSide&)>& sender,
                    const std::function<void(ReceiverSide&)>& receiver) {
  PairBarrier barrier;
  SenderSide sending{std::move(sender_channel), "the in-process receiver", [&] { barrier.arrive(0); }, stage};
  ReceiverSide receiving{std::move(receiver_channel), "the in-process sender", [&] { barrier.arrive(1); }, fetch};
  std::string sender_error;
  std::thread thread([&] {
    try {
      sender(sending);
    } catch (const std::exception& error) {
      sender_error = error.what();
    }
    barrier.leave(0);
    sending.channel.reset();
  });
  try {
    receiver(receiving);
  } catch (const std::exception& error) {
    ADD_FAILURE() << "the receiving side threw: " << error.what();
  }
  barrier.leave(1);
  receiving.channel.reset();  // a sender still waiting on this end fails at once
  thread.join();
  if (!sender_error.empty()) ADD_FAILURE() << "the sending side threw: " << sender_error;
}

}  // namespace sluice::transport::testing
