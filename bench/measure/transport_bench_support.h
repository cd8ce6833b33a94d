#pragma once
// Private to benchmark/: what the host table (transport_bench.cpp) and the GPU table
// (gpu_transport_bench.cpp, compiled only with CUDA) of the transport benchmark share. No CUDA
// header here.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "bench/measure/transport_bench.h"
#include "runtime/transport/feed_channel.h"
#include "runtime/transport/inproc_channel.h"

namespace sluice::benchmark::detail {

// Timed batches per measurement: bytes_per_point / bytes, within [20, 5000].
int iterations(double bytes_per_point, size_t bytes);
// Untimed batches sent before them.
int warmup(int iterations);

// The channel options of one measurement: `bytes` per slot, options.slots slots, 60 s deadline.
transport::ChannelOptions channel_options(const TransportBenchOptions& options, size_t bytes, int channel_id);

// In-process pair: a data thread sends `data` (warmup + n times), this thread receives and
// releases every batch at once. Returns this thread's seconds per batch after the warm-up. An
// error on the data thread is rethrown here after it has been joined.
double time_channel_pair(transport::ChannelPair pair, const void* data, size_t bytes, int n);

// Two ranks, both call it: rank 0 makes its endpoint with `make_sender` and sends `data` (warmup
// + n times), rank 1 makes its endpoint with `make_receiver` and times receive + release. Both
// endpoints are closed and destroyed before the receiver's seconds per batch travel to rank 0
// (cuda_ipc's receiver frees its slots only after the sender unmapped them). Returns the
// receiver's seconds per batch on both ranks. `result_tag`: the MPI tag of that result.
double time_rank_pair(const MpiSession& session,
                      const std::function<std::unique_ptr<transport::SendChannel>()>& make_sender,
                      const std::function<std::unique_ptr<transport::ReceiveChannel>()>& make_receiver,
                      const void* data, size_t bytes, int n, int result_tag);

// Rank 0 tells rank 1 that the next two-rank measurement starts (rank 1 sleeps in the receive
// meanwhile, so it does not take cycles from rank 0's one-rank measurements).
void start_two_rank_part(const MpiSession& session, int tag);

// "64K", "16M": a table's size column.
std::string human(size_t bytes);

// The GPU table (gpu_transport_bench.cpp). Collective; the caller checked that every rank sees a
// CUDA device. `channel_id`: the first channel id for the two-rank channels (advanced).
#if SLUICE_HAVE_CUDA
void run_gpu_table(const MpiSession& session, const TransportBenchOptions& options, int& channel_id);
#endif

}  // namespace sluice::benchmark::detail
