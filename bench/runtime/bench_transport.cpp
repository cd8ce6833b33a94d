// bench_transport: feed transport bandwidth by batch size against the physical baseline measured
// in the same run (a host memcpy of the same size; on a GPU, a device-to-device copy and NCCL
// send-to-self), in the manner of nccl-tests' sendrecv columns. A benchmark, not a test: it
// asserts nothing about time. The measuring core is bench/measure/transport_bench.h (also `sluice
// bench transport`); this is its command line.
//
//   mpirun --bind-to none -np 2 bench_transport [--min-bytes N] [--max-bytes N] [--slots K]
//                                               [--rounds R] [--gpu auto|on|off]
//   bench_transport                (one process: memcpy and inproc; GPU: d2d, nccl_self, nccl)
// (--bind-to none: Open MPI binds each rank to one core by default, and inproc's data thread
// would then share that core with the receiving thread.) --gpu auto (default) adds the GPU table
// when the build has CUDA and a device is visible, else says why not; on makes a missing GPU an
// error (exit 1); off skips it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "bench/measure/transport_bench.h"
#include "common/mpi_session.h"

int main(int argc, char** argv) {
  sluice::MpiSession session(&argc, &argv);
  sluice::benchmark::TransportBenchOptions settings;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    const auto gpu = has_value ? sluice::benchmark::parse_gpu_columns(argv[i + 1]) : std::nullopt;
    if (flag == "--min-bytes" && has_value) settings.min_bytes = sluice::benchmark::parse_bytes(argv[i + 1]);
    else if (flag == "--max-bytes" && has_value) settings.max_bytes = sluice::benchmark::parse_bytes(argv[i + 1]);
    else if (flag == "--slots" && has_value) settings.slots = std::atoi(argv[i + 1]);
    else if (flag == "--rounds" && has_value) settings.rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--gpu" && gpu) settings.gpu = *gpu;
    else {
      std::fprintf(stderr,
                   "usage: [mpirun -np 2] bench_transport [--min-bytes 64K] [--max-bytes 64M] [--slots 3] [--rounds 3] "
                   "[--gpu auto|on|off]\n");
      return 2;
    }
  }
  try {
    return sluice::benchmark::run_transport_bench(session, settings);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_transport: rank %d: %s\n", session.rank(), error.what());
    if (session.size() > 1) session.abort(1);
    return 1;
  }
}
