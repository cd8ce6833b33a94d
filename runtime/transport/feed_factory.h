#pragma once
// Picks a feed backend by name: the role plan's resolved transport (roles.transport after
// `auto`, runtime/train/role_plan.h). The train job makes its channels here, so adding a
// transport is one case in feed_factory.cpp, not a ternary at each call site.
#include <memory>
#include <string>

#include "runtime/transport/feed_channel.h"

namespace sluice {
class MpiSession;
}

namespace sluice::transport {

// Whether `transport` moves batches in device memory (cuda_ipc, nccl): its receiver hands out
// device pointers, and a GPU data rank collates into pinned memory for its GPU.
bool moves_device_memory(const std::string& transport);

// The data rank's end of a channel to model rank `receiver` over `transport` (mpi | cuda_ipc |
// nccl); `device` is this rank's GPU (unused by mpi). Blocks as the backend's factory does.
// Throws ConfigError for any other name.
std::unique_ptr<SendChannel> make_send_channel(const std::string& transport, const MpiSession& session,
                                               int receiver, int device, const ChannelOptions& options);
// The model rank's end of a channel from data rank `sender`; as make_send_channel.
std::unique_ptr<ReceiveChannel> make_receive_channel(const std::string& transport, const MpiSession& session,
                                                     int sender, int device, const ChannelOptions& options);

// Both ends in one process over `transport`: inproc (host memory), or nccl (a loopback on
// `device`). Throws ConfigError for any other name.
ChannelPair make_channel_pair(const std::string& transport, int device, const ChannelOptions& options);

}  // namespace sluice::transport
