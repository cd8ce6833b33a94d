// The feed suite on the two-rank GPU transports (mpirun -np 2): cuda_ipc (both ranks may share
// one GPU) and nccl (needs two GPUs: NCCL refuses two ranks on one). Labels gpu, mpi.
#include "gpu_memory.h"
#include "mpi_harness.h"

namespace sluice::transport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(GpuMpi, FeedChannelSuite,
                         ::testing::Values(FeedTransport{"cuda_ipc", [] { return cuda_ipc_harness(true); }},
                                           FeedTransport{"nccl", [] { return nccl_harness(true); }}),
                         transport_name);

}  // namespace
}  // namespace sluice::transport::testing
