#pragma once
// The inproc transport: both ends in one process (a data thread feeding the trainer thread; the
// one-process quick start). Slots are host memory owned by the pair; send() copies the batch
// into its slot (one memcpy, no other copy).
#include "runtime/transport/feed_channel.h"

namespace sluice::transport {

// Either end may be destroyed first; the other's waits then fail promptly (peer aborted).
ChannelPair make_inproc_channel_pair(const ChannelOptions& options);

}  // namespace sluice::transport
