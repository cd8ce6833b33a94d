// The feed suite on the mpi transport: rank 0 sends, rank 1 receives (mpirun -np 2).
#include "mpi_harness.h"
#include "runtime/transport/mpi_channel.h"

namespace sluice::transport::testing {
namespace {

std::unique_ptr<FeedHarness> mpi_harness() {
  MpiTransport transport;
  transport.make_sender = make_mpi_send_channel;
  transport.make_receiver = make_mpi_receive_channel;
  return std::make_unique<MpiHarness>(std::move(transport));
}

INSTANTIATE_TEST_SUITE_P(Mpi, FeedChannelSuite, ::testing::Values(FeedTransport{"mpi", mpi_harness}),
                         transport_name);

}  // namespace
}  // namespace sluice::transport::testing
