#pragma once
// The one command line of sluice, shared by its two executables (launcher/CMakeLists.txt):
//
//   sluice        links no libtorch: prep, report, cache verify|inspect, config reference|show,
//                 --help and --version run here. For train, doctor and bench it replaces itself
//                 with sluice-train (execv, first thing in main, before MPI_Init: the process keeps
//                 its pid, environment and argv, so mpirun, srun --mpi=pmix and process lookups by
//                 command line see the same `sluice` process). See train_binary.h.
//   sluice-train  links libtorch (the train job, the model) and runs every command.
//
// Why: libtorch's static initialisers register every operator when the binary is loaded, and its
// exit deregisters them: about 1.3 CPU-seconds per process, paid by every rank of a prep job that
// never touches a tensor (docs/performance.md, "Prep speed work").
#include <optional>

namespace CLI {
class App;
}

namespace sluice {
class MpiSession;

namespace launcher {

// The commands that need libtorch (train, doctor, bench), as sluice-train adds and runs them.
class TorchCommands {
 public:
  virtual ~TorchCommands() = default;
  // Adds the commands and their options to `app`.
  virtual void add(CLI::App& app) = 0;
  // After parsing: the chosen command's exit code when it runs without MPI, else nullopt.
  virtual std::optional<int> run_without_mpi() = 0;
  // The chosen command's exit code when it runs with MPI, else nullopt. It may raise
  // `abort_grace_s` (train reads runtime.timeout_s) before it can fail.
  virtual std::optional<int> run_with_mpi(MpiSession& session, double& abort_grace_s) = 0;
  // How long MPI's start may wait for the job's other ranks (MpiSession): the chosen command's
  // runtime.timeout_s where its config reads, else the setting's default.
  virtual double join_timeout_s() const = 0;
};

// Parses the command line, runs the chosen command and returns the process's exit code (the
// contract of docs/operations.md, "Exit codes"). With `torch` null (the `sluice` executable) the
// commands that need libtorch are listed in --help but never run here: main hands them to
// sluice-train before it calls this.
int launch(int argc, char** argv, TorchCommands* torch);

}  // namespace launcher
}  // namespace sluice
