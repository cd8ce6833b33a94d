#pragma once
// Feed transport bandwidth by message size against a host memcpy of the same size measured in the
// same run, in the manner of nccl-tests' sendrecv columns (size, count, time, GB/s, ratio).
// Used by bench/runtime/bench_transport and `sluice bench transport`.
//
// Per size: memcpy = one thread copying the batch into a warm buffer (what inproc's send does
// once per batch); inproc = a data thread feeding this thread through make_inproc_channel_pair;
// mpi = rank 0 feeding rank 1 through the mpi transport (timed on the receiver); mpi_raw = plain
// MPI_Isend/MPI_Irecv with the same window of K messages in flight, i.e. what Open MPI itself
// moves between the two ranks, so mpi / mpi_raw is the transport's own overhead. Each
// measurement runs warm-up batches first; the receiver releases every batch at once, so these
// are the transport's ceilings with an idle trainer. Each column is the best of `rounds`
// interleaved rounds (shared machines are noisy). GB/s = 1e9 bytes/s.
#include <cstddef>
#include <string>

namespace sluice {
class MpiSession;
}

namespace sluice::benchmark {

struct TransportBenchOptions {
  size_t min_bytes = 64 * 1024;
  size_t max_bytes = 64 * 1024 * 1024;
  int slots = 3;
  double bytes_per_point = 512.0 * 1024 * 1024;  // timed bytes per size, transport and round
  int rounds = 3;
};

// "64K", "16M", "1G", "4096" -> bytes (K/KiB, M/MiB, G/GiB are powers of 1024).
size_t parse_bytes(const std::string& text);

// Runs on 1 rank (memcpy, inproc) or 2 ranks (also mpi and raw MPI); prints the table on rank 0.
// Returns 2 on more than 2 ranks, else 0.
int run_transport_bench(const MpiSession& session, const TransportBenchOptions& options);

}  // namespace sluice::benchmark
