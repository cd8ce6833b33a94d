#pragma once
// The command line of `sluice bench sweep|max-batch|transport|cache|mel`, kept out of main.cpp:
// main adds it to its CLI::App and asks it to run; the measuring cores are in bench/measure/.
#include <memory>
#include <optional>

namespace CLI {
class App;
}

namespace sluice {
class MpiSession;

// `sluice bench` in one line: its --help, and the command list of the `sluice` executable, which
// hands bench to sluice-train without linking this library (launcher/launch.h).
inline constexpr const char* bench_summary =
    "Measure: end-to-end sweeps of the training settings, the largest batch that fits the GPU, and "
    "micro-benchmarks of the transport, the cache and the mel extraction";

class BenchCommand {
 public:
  // Adds `bench` with its subcommands to `app`.
  explicit BenchCommand(CLI::App& app);
  ~BenchCommand();
  BenchCommand(const BenchCommand&) = delete;
  BenchCommand& operator=(const BenchCommand&) = delete;

  // After parsing: the exit code of the chosen subcommand when it runs without MPI (sweep, which
  // starts its own mpirun; max-batch; cache; mel), or nullopt when none of these was chosen.
  std::optional<int> run_without_mpi();
  // The exit code of `bench transport` (it measures between the ranks of this launch), or nullopt.
  std::optional<int> run_with_mpi(MpiSession& session);

 private:
  struct Options;
  std::unique_ptr<Options> options_;
};

}  // namespace sluice
