#pragma once
// The mpi transport: host memory between two ranks of MPI_COMM_WORLD (CPU runs, CI). Batches go
// as MPI messages straight into the receiver's slots: the receiver posts MPI_Irecv for a slot
// before granting its credit, so a batch never waits in MPI's unexpected queue. Every wait polls
// (MPI_Test/MPI_Iprobe) against the deadline; nothing calls a blocking MPI_Recv or MPI_Wait.
//
// Messages use tags 0x4000 + 8 * channel_id + 0..7 on MPI_COMM_WORLD, a range reserved for the
// feed (no other sluice traffic may use tags 0x4000..0x7fff).
//
// Making an endpoint does not wait for the peer: the receiver posts its receives and credits,
// the sender finds them on its first send().
#include <memory>

#include "runtime/transport/feed_channel.h"

namespace sluice {
class MpiSession;
}

namespace sluice::transport {

// `session` must outlive the channel. `receiver` is the model rank.
std::unique_ptr<SendChannel> make_mpi_send_channel(const MpiSession& session, int receiver,
                                                   const ChannelOptions& options);
// `sender` is the data rank.
std::unique_ptr<ReceiveChannel> make_mpi_receive_channel(const MpiSession& session, int sender,
                                                         const ChannelOptions& options);

}  // namespace sluice::transport
