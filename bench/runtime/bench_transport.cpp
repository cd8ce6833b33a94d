// bench_transport: feed transport bandwidth by batch size against the physical baseline measured
// in the same run (a host memcpy of the same size), in the manner of nccl-tests' sendrecv
// columns. A benchmark, not a test: it asserts nothing about time. The measuring core is
// benchmark/transport_bench.h (also `sluice bench transport`); this is its command line.
//
//   mpirun --bind-to none -np 2 bench_transport [--min-bytes N] [--max-bytes N] [--slots K]
//   bench_transport                (one process: memcpy and inproc only)
// (--bind-to none: Open MPI binds each rank to one core by default, and inproc's data thread
// would then share that core with the receiving thread.)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "benchmark/transport_bench.h"
#include "common/mpi_session.h"

int main(int argc, char** argv) {
  sluice::MpiSession session(&argc, &argv);
  sluice::benchmark::TransportBenchOptions settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--min-bytes") settings.min_bytes = sluice::benchmark::parse_bytes(argv[i + 1]);
    else if (flag == "--max-bytes") settings.max_bytes = sluice::benchmark::parse_bytes(argv[i + 1]);
    else if (flag == "--slots") settings.slots = std::atoi(argv[i + 1]);
    else if (flag == "--rounds") settings.rounds = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: [mpirun -np 2] bench_transport [--min-bytes 64K] [--max-bytes 64M] [--slots 3] [--rounds 3]\n");
      return 2;
    }
  }
  return sluice::benchmark::run_transport_bench(session, settings);
}
