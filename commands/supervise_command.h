#pragma once
// The command line of `sluice supervise [OPTIONS] -- train ARGS...`: the in-job restart loop
// (supervisor/supervisor.h, docs/operations.md "In-job restart"). Runs without MPI, beside the
// launcher it starts.
#include <optional>

#include "supervisor/supervisor.h"

namespace CLI {
class App;
}

namespace sluice {

class SuperviseCommand {
 public:
  void add(CLI::App& app);
  // After parsing: the exit code when `supervise` was chosen, else nullopt. `self` is this
  // executable (the ranks run it unless --sluice says otherwise).
  std::optional<int> run(const std::string& self) const;

 private:
  CLI::App* command_ = nullptr;
  supervisor::SupervisorOptions options_;
  std::string run_dir_;
};

}  // namespace sluice
