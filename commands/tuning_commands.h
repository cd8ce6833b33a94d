#pragma once
// The command lines of `sluice doctor` and `sluice bench ...`, kept out of main.cpp: main adds
// them to its CLI::App and asks them to run; the work itself is in commands/doctor.h and
// benchmark/.
#include <memory>
#include <optional>

namespace CLI {
class App;
}

namespace sluice {
class MpiSession;

class TuningCommands {
 public:
  // Adds `doctor` and `bench` (with its subcommands) to `app`.
  explicit TuningCommands(CLI::App& app);
  ~TuningCommands();
  TuningCommands(const TuningCommands&) = delete;
  TuningCommands& operator=(const TuningCommands&) = delete;

  // After parsing: the exit code of the chosen command when it runs without MPI (bench sweep,
  // max-batch, cache, mel), or nullopt when none of these was chosen.
  std::optional<int> run_without_mpi();
  // The exit code of `doctor` or `bench transport` (both need the MPI session), or nullopt.
  std::optional<int> run_with_mpi(MpiSession& session);

 private:
  struct Options;
  std::unique_ptr<Options> options_;
};

}  // namespace sluice
