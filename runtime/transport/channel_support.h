#pragma once
// Private to runtime/transport: what every transport shares (option checks, error texts, stats,
// the polling back-off, checksums, host slot memory). Not a public header.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/clock.h"
#include "common/poll_backoff.h"
#include "runtime/transport/feed_channel.h"

namespace sluice::transport::detail {

using sluice::Clock;
using sluice::Deadline;
using sluice::deadline_after;
using sluice::seconds_since;

// ConfigError naming the channel when slots, slot_bytes, timeout_s or channel_id are out of
// range. `max_slot_bytes`: the transport's own limit.
void check_options(const ChannelOptions& options, const char* transport, size_t max_slot_bytes);

// How one endpoint names itself and its peer in errors.
struct EndpointNames {
  std::string channel;    // options.name
  std::string transport;  // "inproc", "mpi", ...
  std::string role;       // "sender" or "receiver": this endpoint
  std::string peer;       // "rank 1 (host node07)", "the in-process receiver"
};

// The text of every TransportError an endpoint raises, in one format:
//   feed channel "NAME" (mpi sender): WHAT; peer: PEER; last sequence sent: N. HINT
std::string describe_failure(const EndpointNames& names, const std::string& what,
                             std::optional<uint64_t> last_sequence, const std::string& hint);

// A wait that ran out: names what was awaited and the deadline. `hint` says what to do; empty:
// the peer died, hung or is far behind.
std::string describe_timeout(const EndpointNames& names, double timeout_s, const std::string& awaited,
                             std::optional<uint64_t> last_sequence, const std::string& hint = "");

// An endpoint fails once: the first error's text is kept and every later call throws it again.
class FailureLatch {
 public:
  bool failed() const { return !message_.empty(); }
  void check() const {
    if (failed()) throw TransportError(message_ + " (this channel already failed)");
  }
  [[noreturn]] void fail(const std::string& message) {
    if (message_.empty()) message_ = message;
    throw TransportError(message);
  }
  void record(const std::string& message) {
    if (message_.empty()) message_ = message;
  }

 private:
  std::string message_;
};

// ChannelStats behind a lock: written by the endpoint's thread, read from any thread.
class StatsCounter {
 public:
  void add_batch(size_t bytes, double wait_s, double transfer_s);
  void add_wait(double wait_s);
  ChannelStats snapshot() const;

 private:
  mutable std::mutex mutex_;
  ChannelStats stats_;
};

// The pause between polls of a wait (common/poll_backoff.h): spins briefly, then sleeps longer
// the longer the wait lasts, so that an idle endpoint costs nearly nothing.
using sluice::PollBackoff;

// XXH3-64 of host bytes.
uint64_t checksum(const void* data, size_t bytes);

// Host memory for K slots, page aligned.
class HostSlots {
 public:
  HostSlots(int slots, size_t slot_bytes);
  void* slot(int index) const {
    return memory_.get() + static_cast<size_t>(index) * stride_;
  }
  // Gives up the memory without freeing it: MPI may still write into a slot whose receive could
  // not be cancelled (a peer that died mid-transfer).
  void leak() { (void)memory_.release(); }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  size_t stride_ = 0;
  std::unique_ptr<std::byte[], Free> memory_;
};

}  // namespace sluice::transport::detail
