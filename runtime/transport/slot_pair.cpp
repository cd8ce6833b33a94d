#include "runtime/transport/slot_pair.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <vector>

namespace sluice::transport::detail {
namespace {

struct FilledSlot {
  int slot = -1;
  uint64_t sequence = 0;
  size_t bytes = 0;
  uint64_t checksum = 0;
};

// Everything both ends see. Held by both through shared_ptr, so either end may go first.
struct PairState {
  // Left allocated at the end when the receiver asked (keep_slots_alive): the last end to go
  // destroys the state.
  ~PairState() {
    if (keep_slots) store->leak();
  }

  std::unique_ptr<SlotStore> store;
  bool keep_slots = false;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<int> credits;         // granted and unused, in grant order
  std::deque<FilledSlot> filled;   // sent and not yet received, in sequence order
  std::optional<uint64_t> end_after;  // the sender closed after this many batches
  bool sender_aborted = false;
  bool receiver_shut_down = false;
  bool receiver_aborted = false;
};

class SlotPairSender final : public SendChannel {
 public:
  SlotPairSender(std::shared_ptr<PairState> state, const ChannelOptions& options, EndpointNames names)
      : state_(std::move(state)), options_(options), names_(std::move(names)) {}

  ~SlotPairSender() override {
    if (closed_ && !failure_.failed()) return;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->sender_aborted = true;
    state_->changed.notify_all();
  }

  void send(const void* data, size_t bytes) override {
    failure_.check();
    if (closed_) throw TransportError(describe_failure(names_, "send() after close()", last(), ""));
    if (bytes > options_.slot_bytes) {
      throw TransportError(describe_failure(
          names_, "batch of " + std::to_string(bytes) + " bytes exceeds slot_bytes = " +
                      std::to_string(options_.slot_bytes),
          last(), "slot_bytes must be the batch plan's largest batch"));
    }
    const auto start = Clock::now();
    int slot = -1;
    {
      // The receiver is a thread of this process: alive as long as this one runs, so its step
      // may take any time (LIVENESS in common/heartbeat.h). Its failure or close wakes us.
      std::unique_lock<std::mutex> lock(state_->mutex);
      state_->changed.wait(lock, [&] {
        return !state_->credits.empty() || state_->receiver_shut_down || state_->receiver_aborted;
      });
      if (state_->receiver_shut_down) fail(lock, "the receiver shut the channel down");
      if (state_->receiver_aborted) fail(lock, "the receiver aborted (destroyed without close(), or failed)");
      slot = state_->credits.front();
      state_->credits.pop_front();
    }
    const double wait_s = seconds_since(start);
    const auto moved = Clock::now();
    try {
      state_->store->fill(slot, data, bytes, deadline_after(options_.timeout_s));
    } catch (const TransportError& error) {
      std::unique_lock<std::mutex> lock(state_->mutex);
      fail(lock, describe_failure(names_, std::string("moving the batch failed: ") + error.what(),
                                  last(), ""), true);
    }
    FilledSlot filled{slot, next_sequence_, bytes, 0};
    if (options_.checksum && state_->store->host_memory()) filled.checksum = checksum(data, bytes);
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->filled.push_back(filled);
    }
    state_->changed.notify_all();
    ++next_sequence_;
    stats_.add_batch(bytes, wait_s, seconds_since(moved));
  }

  void close() override {
    failure_.check();
    if (closed_) return;
    closed_ = true;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->end_after = next_sequence_;
    state_->changed.notify_all();
  }

  bool receiver_closed() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->receiver_shut_down;
  }

  ChannelStats stats() const override { return stats_.snapshot(); }

 private:
  std::optional<uint64_t> last() const {
    return next_sequence_ == 0 ? std::nullopt : std::optional<uint64_t>(next_sequence_ - 1);
  }

  // Marks this end failed, tells the receiver, throws. `complete`: `what` is already a full text.
  [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& what, bool complete = false) {
    const std::string message = complete ? what : describe_failure(names_, what, last(), "");
    state_->sender_aborted = true;
    state_->changed.notify_all();
    lock.unlock();
    failure_.fail(message);
  }

  std::shared_ptr<PairState> state_;
  ChannelOptions options_;
  EndpointNames names_;
  FailureLatch failure_;
  StatsCounter stats_;
  uint64_t next_sequence_ = 0;
  bool closed_ = false;
};

class SlotPairReceiver final : public ReceiveChannel {
 public:
  SlotPairReceiver(std::shared_ptr<PairState> state, const ChannelOptions& options, EndpointNames names)
      : state_(std::move(state)), options_(options), names_(std::move(names)),
        held_(static_cast<size_t>(options.slots), false) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (int slot = 0; slot < options_.slots; ++slot) state_->credits.push_back(slot);
  }

  ~SlotPairReceiver() override {
    if (closed_ && !failure_.failed()) return;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->receiver_aborted = true;
    state_->changed.notify_all();
  }

  std::optional<ReceivedBatch> receive() override {
    failure_.check();
    if (ended_) return std::nullopt;
    if (closed_) throw TransportError(describe_failure(names_, "receive() after close()", last(), ""));
    const auto start = Clock::now();
    // The sender is a thread of this process (see send()): no deadline while it lives, except
    // for a trainer holding every slot, which waits for nothing that can come.
    const Deadline deadline = deadline_after(options_.timeout_s);
    FilledSlot filled;
    {
      std::unique_lock<std::mutex> lock(state_->mutex);
      const auto ready = [&] { return !state_->filled.empty() || stream_complete() || state_->sender_aborted; };
      const bool woken = held_hint().empty() ? (state_->changed.wait(lock, ready), true)
                                             : state_->changed.wait_until(lock, deadline, ready);
      if (state_->filled.empty()) {
        if (stream_complete()) {
          ended_ = true;
          stats_.add_wait(seconds_since(start));
          return std::nullopt;
        }
        if (state_->sender_aborted) {
          fail(lock, describe_failure(names_, "the sender aborted (destroyed without close(), or failed) after " +
                                                  std::to_string(delivered_) + " batches",
                                      last(), ""));
        }
        if (!woken) {
          fail(lock, describe_timeout(names_, options_.timeout_s,
                                      "batch " + std::to_string(delivered_), last(), held_hint()));
        }
      }
      filled = state_->filled.front();
      state_->filled.pop_front();
    }
    const double wait_s = seconds_since(start);
    const auto checked = Clock::now();
    void* data = state_->store->slot(filled.slot);
    if (filled.sequence != delivered_) {
      std::unique_lock<std::mutex> lock(state_->mutex);
      fail(lock, describe_failure(names_, "batch out of order: got sequence " + std::to_string(filled.sequence) +
                                              ", expected " + std::to_string(delivered_),
                                  last(), "This is a bug in sluice's transport"));
    }
    if (options_.checksum && state_->store->host_memory() && checksum(data, filled.bytes) != filled.checksum) {
      std::unique_lock<std::mutex> lock(state_->mutex);
      fail(lock, describe_failure(names_, "checksum mismatch in batch " + std::to_string(filled.sequence), last(),
                                  "Memory corruption between the data thread and the trainer"));
    }
    ++delivered_;
    held_[static_cast<size_t>(filled.slot)] = true;
    stats_.add_batch(filled.bytes, wait_s, seconds_since(checked));
    return ReceivedBatch{filled.slot, filled.sequence, data, filled.bytes};
  }

  void release(const ReceivedBatch& batch) override {
    failure_.check();
    if (batch.slot < 0 || batch.slot >= options_.slots || !held_[static_cast<size_t>(batch.slot)]) {
      throw TransportError(describe_failure(names_, "release() of slot " + std::to_string(batch.slot) +
                                                        ", which the trainer does not hold",
                                            last(), "Release each received batch exactly once"));
    }
    held_[static_cast<size_t>(batch.slot)] = false;
    if (closed_) return;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->credits.push_back(batch.slot);
    }
    state_->changed.notify_all();
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->receiver_shut_down = true;
    state_->changed.notify_all();
  }

  void keep_slots_alive() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->keep_slots = true;
  }

  ChannelStats stats() const override { return stats_.snapshot(); }

 private:
  bool stream_complete() const { return state_->end_after && delivered_ == *state_->end_after; }

  std::optional<uint64_t> last() const {
    return delivered_ == 0 ? std::nullopt : std::optional<uint64_t>(delivered_ - 1);
  }

  std::string held_hint() const {
    if (std::count(held_.begin(), held_.end(), true) < options_.slots) return "";
    return "All " + std::to_string(options_.slots) +
           " slots are held by the trainer, so no batch can arrive: release() one before receive()";
  }

  [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& message) {
    state_->receiver_aborted = true;
    state_->changed.notify_all();
    lock.unlock();
    failure_.fail(message);
  }

  std::shared_ptr<PairState> state_;
  ChannelOptions options_;
  EndpointNames names_;
  FailureLatch failure_;
  StatsCounter stats_;
  std::vector<bool> held_;
  uint64_t delivered_ = 0;
  bool ended_ = false;
  bool closed_ = false;
};

}  // namespace

ChannelPair make_slot_pair(std::unique_ptr<SlotStore> store, const ChannelOptions& options,
                           const std::string& transport) {
  auto state = std::make_shared<PairState>();
  state->store = std::move(store);
  ChannelPair pair;
  pair.receiver = std::make_unique<SlotPairReceiver>(
      state, options, EndpointNames{options.name, transport, "receiver", "the in-process sender"});
  pair.sender = std::make_unique<SlotPairSender>(
      state, options, EndpointNames{options.name, transport, "sender", "the in-process receiver"});
  return pair;
}

}  // namespace sluice::transport::detail
