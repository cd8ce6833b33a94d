#pragma once
// The nccl transport: batches move with ncclSend/ncclRecv on a dedicated CUDA stream per
// endpoint; credits, headers (which carry the byte count NCCL needs before ncclRecv), end of
// stream and shutdown travel over MPI as in the mpi transport (same tags).
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0), so that creating one and every
// transfer can be polled (ncclCommGetAsyncError, cudaEventQuery) against the deadline; on
// expiry or a peer's abort the endpoint calls ncclCommAbort and throws TransportError.
// Set-up (the unique id's exchange and the communicator's creation) waits at least 30 s even when
// timeout_s is shorter: NCCL's first initialisation in a process alone can take seconds.
// NCCL refuses two ranks on one GPU ("Duplicate GPU"): use cuda_ipc there.
//
// Built when CMake found the CUDA toolkit and NCCL (SLUICE_HAVE_NCCL); in other builds the
// factories throw ConfigError.
#include <memory>

#include "runtime/transport/feed_channel.h"

namespace sluice {
class MpiSession;
}

namespace sluice::transport {

// Two ranks on distinct GPUs. Both ends build one two-rank NCCL communicator (the sender makes
// the unique id and sends it over MPI); both factories block until it is up (deadline).
// `data` given to send() is device memory on the sender's `device`.
std::unique_ptr<SendChannel> make_nccl_send_channel(const MpiSession& session, int receiver,
                                                    int device, const ChannelOptions& options);
std::unique_ptr<ReceiveChannel> make_nccl_receive_channel(const MpiSession& session, int sender,
                                                          int device, const ChannelOptions& options);

// Both ends in one process on one GPU: a one-rank communicator that sends to itself (ncclSend
// and ncclRecv in one group). For tests and single-GPU runs with a data thread.
ChannelPair make_nccl_loopback_channel_pair(int device, const ChannelOptions& options);

}  // namespace sluice::transport
