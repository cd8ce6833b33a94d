#pragma once
// The cuda_ipc transport: two ranks on one node, on two GPUs or sharing one (where NCCL refuses).
// The receiver's K slots are device memory on its GPU; their cudaIpcMemHandle_t go to the sender
// over MPI when the channel is made, and the sender copies each batch with cudaMemcpyAsync on
// its own stream straight into the granted slot. The sender waits for the copy (a CUDA event,
// polled against the deadline) and then sends the batch header over MPI, so a header means the
// bytes are in place. Credits, headers, end of stream and shutdown travel as in the mpi
// transport (same tags).
//
// Built when CMake found the CUDA toolkit (SLUICE_HAVE_CUDA); in other builds the factories
// throw ConfigError.
#include <memory>

#include "runtime/transport/feed_channel.h"

namespace sluice {
class MpiSession;
}

namespace sluice::transport {

// `data` given to send() is device memory (or host memory: the copy works from either).
// `device`: the CUDA device this rank uses. Blocks until the receiver's slot handles arrive
// (deadline: options.timeout_s).
std::unique_ptr<SendChannel> make_cuda_ipc_send_channel(const MpiSession& session, int receiver,
                                                        int device, const ChannelOptions& options);
// Allocates the slots on `device` and sends their handles to the sender.
std::unique_ptr<ReceiveChannel> make_cuda_ipc_receive_channel(const MpiSession& session,
                                                              int sender, int device,
                                                              const ChannelOptions& options);

}  // namespace sluice::transport
