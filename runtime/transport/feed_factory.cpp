#include "runtime/transport/feed_factory.h"

#include "common/error.h"
#include "runtime/transport/cuda_ipc_channel.h"
#include "runtime/transport/inproc_channel.h"
#include "runtime/transport/mpi_channel.h"
#include "runtime/transport/nccl_channel.h"

namespace sluice::transport {
namespace {

[[noreturn]] void unknown(const std::string& transport, const char* between) {
  throw ConfigError("feed transport '" + transport + "' cannot join " + between +
                    " (roles.transport: inproc in one process; mpi, cuda_ipc or nccl between ranks)");
}

}  // namespace

bool moves_device_memory(const std::string& transport) { return transport == "nccl" || transport == "cuda_ipc"; }

std::unique_ptr<SendChannel> make_send_channel(const std::string& transport, const MpiSession& session,
                                               int receiver, int device, const ChannelOptions& options) {
  if (transport == "mpi") return make_mpi_send_channel(session, receiver, options);
  if (transport == "cuda_ipc") return make_cuda_ipc_send_channel(session, receiver, device, options);
  if (transport == "nccl") return make_nccl_send_channel(session, receiver, device, options);
  unknown(transport, "two ranks");
}

std::unique_ptr<ReceiveChannel> make_receive_channel(const std::string& transport, const MpiSession& session,
                                                     int sender, int device, const ChannelOptions& options) {
  if (transport == "mpi") return make_mpi_receive_channel(session, sender, options);
  if (transport == "cuda_ipc") return make_cuda_ipc_receive_channel(session, sender, device, options);
  if (transport == "nccl") return make_nccl_receive_channel(session, sender, device, options);
  unknown(transport, "two ranks");
}

ChannelPair make_channel_pair(const std::string& transport, int device, const ChannelOptions& options) {
  if (transport == "inproc") return make_inproc_channel_pair(options);
  if (transport == "nccl") return make_nccl_loopback_channel_pair(device, options);
  unknown(transport, "two threads of one process");
}

}  // namespace sluice::transport
