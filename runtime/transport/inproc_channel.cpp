#include "runtime/transport/inproc_channel.h"

#include <cstring>
#include <limits>

#include "runtime/transport/slot_pair.h"

namespace sluice::transport {
namespace {

// Host slots; a batch moves with one memcpy on the sender's thread.
class HostSlotStore final : public detail::SlotStore {
 public:
  HostSlotStore(int slots, size_t slot_bytes) : slots_(slots, slot_bytes) {}
  void* slot(int index) override { return slots_.slot(index); }
  void leak() override { slots_.leak(); }
  void fill(int index, const void* data, size_t bytes, detail::Deadline) override {
    if (bytes > 0) std::memcpy(slots_.slot(index), data, bytes);
  }
  bool host_memory() const override { return true; }

 private:
  detail::HostSlots slots_;
};

}  // namespace

ChannelPair make_inproc_channel_pair(const ChannelOptions& options) {
  detail::check_options(options, "inproc", std::numeric_limits<size_t>::max() / 4);
  return detail::make_slot_pair(std::make_unique<HostSlotStore>(options.slots, options.slot_bytes),
                                options, "inproc");
}

}  // namespace sluice::transport
