#pragma once
// Private to runtime/transport: the feed protocol between two threads of one process, over slot
// memory a transport provides (host memory for inproc, device memory for nccl loopback). The
// credits, filled slots, end of stream and shutdown live in one shared state under a mutex;
// waiters sleep on a condition variable with the deadline, so a close or abort wakes them at
// once.
#include <memory>
#include <string>

#include "runtime/transport/channel_support.h"
#include "runtime/transport/inproc_channel.h"

namespace sluice::transport::detail {

class SlotStore {
 public:
  virtual ~SlotStore() = default;
  virtual void* slot(int index) = 0;
  // Moves `bytes` from `data` into slot `index`; returns when `data` may be reused and the bytes
  // are in place. Called on the sender's thread. Throws TransportError when the move fails or
  // does not finish by `deadline`.
  virtual void fill(int index, const void* data, size_t bytes, Deadline deadline) = 0;
  // Checksums are computed on host memory only.
  virtual bool host_memory() const = 0;
  // Gives up the slots' memory without freeing it; called only as the store is destroyed, when the
  // receiver asked to keep the slots alive (ReceiveChannel::keep_slots_alive).
  virtual void leak() = 0;
};

// `transport` names the transport in errors ("inproc", "nccl loopback").
ChannelPair make_slot_pair(std::unique_ptr<SlotStore> store, const ChannelOptions& options,
                           const std::string& transport);

}  // namespace sluice::transport::detail
