#include "runtime/transport/channel_support.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

#include <xxhash.h>

namespace sluice::transport::detail {


void check_options(const ChannelOptions& options, const char* transport, size_t max_slot_bytes) {
  const std::string where = std::string("feed channel \"") + options.name + "\" (" + transport + "): ";
  if (options.slots < 1 || options.slots > 64) {
    throw ConfigError(where + "slots = " + std::to_string(options.slots) +
                      " is out of range [1, 64]; 3 (triple buffering) is the usual choice");
  }
  if (options.slot_bytes == 0 || options.slot_bytes > max_slot_bytes) {
    throw ConfigError(where + "slot_bytes = " + std::to_string(options.slot_bytes) +
                      " is out of range [1, " + std::to_string(max_slot_bytes) +
                      "]; it must be the batch plan's largest batch in bytes");
  }
  if (!(options.timeout_s > 0.0)) {
    throw ConfigError(where + "timeout_s must be > 0 (runtime.timeout_s)");
  }
  if (options.channel_id < 0 || options.channel_id >= 2048) {
    throw ConfigError(where + "channel_id = " + std::to_string(options.channel_id) +
                      " is out of range [0, 2048)");
  }
}

std::string describe_failure(const EndpointNames& names, const std::string& what,
                             std::optional<uint64_t> last_sequence, const std::string& hint) {
  std::string text = "feed channel \"" + names.channel + "\" (" + names.transport + " " + names.role +
                     "): " + what + "; peer: " + names.peer + "; last sequence " +
                     (names.role == "sender" ? "sent: " : "received: ") +
                     (last_sequence ? std::to_string(*last_sequence) : std::string("none yet"));
  if (!hint.empty()) text += ". " + hint;
  return text;
}

std::string describe_timeout(const EndpointNames& names, double timeout_s, const std::string& awaited,
                             std::optional<uint64_t> last_sequence, const std::string& hint) {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%g", timeout_s);
  return describe_failure(
      names, std::string("timed out after ") + seconds + " s waiting for " + awaited, last_sequence,
      hint.empty() ? "The peer died, hung, or is far behind (raise runtime.timeout_s if it is only slow)" : hint);
}

void StatsCounter::add_batch(size_t bytes, double wait_s, double transfer_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.batches += 1;
  stats_.bytes += bytes;
  stats_.wait_s += wait_s;
  stats_.transfer_s += transfer_s;
}

void StatsCounter::add_wait(double wait_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.wait_s += wait_s;
}

ChannelStats StatsCounter::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

uint64_t checksum(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

HostSlots::HostSlots(int slots, size_t slot_bytes) {
  constexpr size_t page = 4096;
  stride_ = (slot_bytes + page - 1) / page * page;
  void* memory = std::aligned_alloc(page, stride_ * static_cast<size_t>(slots));
  if (memory == nullptr) throw std::bad_alloc();
  memory_.reset(static_cast<std::byte*>(memory));
}

void HostSlots::Free::operator()(std::byte* p) const { std::free(p); }

}  // namespace sluice::transport::detail
