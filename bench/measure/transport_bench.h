#pragma once
// Feed transport bandwidth by message size against the physical baseline of the same memory,
// measured in the same run, in the manner of nccl-tests' sendrecv columns (size, count, time,
// GB/s, ratio). Used by bench/runtime/bench_transport and `sluice bench transport`.
//
// Host table, per size: memcpy = one thread copying the batch into a warm buffer (what inproc's
// send does once per batch); inproc = a data thread feeding this thread through
// make_inproc_channel_pair; mpi = rank 0 feeding rank 1 through the mpi transport (timed on the
// receiver); mpi_raw = plain MPI_Isend/MPI_Irecv with the same window of K messages in flight,
// i.e. what Open MPI itself moves between the two ranks, so mpi / mpi_raw is the transport's own
// overhead. Ratios are to memcpy.
//
// GPU table (a build with CUDA and a visible device on every rank; each rank uses GPU
// local_rank % devices, so one GPU serves both ranks), per size: d2d = cudaMemcpyAsync device
// to device on one GPU (the baseline of cuda_ipc); nccl_self = raw ncclSend + ncclRecv to itself
// in one group on a one-rank communicator (the baseline of nccl: NCCL refuses two ranks on one
// GPU); nccl = a data thread feeding this thread device memory through
// make_nccl_loopback_channel_pair; cuda_ipc = rank 0 feeding rank 1 device memory through the
// cuda_ipc transport (2 ranks; timed on the receiver). Ratios: nccl / nccl_self, cuda_ipc / d2d.
// Without CUDA in the build or a device on some rank, one line says why the table is skipped.
//
// Each measurement runs warm-up batches first; the receiver releases every batch at once, so
// these are the transports' ceilings with an idle trainer. Each column is the best of `rounds`
// interleaved rounds (shared machines are noisy). GB/s = 1e9 bytes/s, each byte counted once
// (a copy's read and write are not added up).
#include <cstddef>
#include <optional>
#include <string>

namespace sluice {
class MpiSession;
}

namespace sluice::benchmark {

// Whether to measure the GPU table: automatic = when the build has CUDA and every rank sees a
// device (else one line says why not); on = the same, but a missing GPU fails the run (exit 1);
// off = host table only.
enum class GpuColumns { automatic, on, off };

struct TransportBenchOptions {
  size_t min_bytes = 64 * 1024;
  size_t max_bytes = 64 * 1024 * 1024;
  int slots = 3;
  double bytes_per_point = 512.0 * 1024 * 1024;  // timed bytes per size, transport and round (host)
  // The same for the GPU table: a device copies ~1e12 B/s, so it needs far more bytes per
  // measurement than the host to run long enough to time.
  double gpu_bytes_per_point = 8.0 * 1024 * 1024 * 1024;
  int rounds = 3;
  GpuColumns gpu = GpuColumns::automatic;
};

// "64K", "16M", "1G", "4096" -> bytes (K/KiB, M/MiB, G/GiB are powers of 1024).
size_t parse_bytes(const std::string& text);

// "auto" | "on" | "off"; nullopt for anything else.
std::optional<GpuColumns> parse_gpu_columns(const std::string& text);

// Runs on 1 rank (memcpy, inproc; GPU: d2d, nccl_self, nccl) or 2 ranks (also mpi and raw MPI;
// GPU: cuda_ipc); prints the tables on rank 0. Collective: every rank calls it with the same
// options. Returns 2 on more than 2 ranks, 1 when GpuColumns::on and the GPU table cannot be
// measured, else 0. A failing transport throws (sluice::Error), as in training.
int run_transport_bench(const MpiSession& session, const TransportBenchOptions& options);

}  // namespace sluice::benchmark
