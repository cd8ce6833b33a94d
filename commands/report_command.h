#pragma once
// The command line of `sluice report DIR`: the bottleneck report from a run's saved timelines
// (report/, docs/report.md). Runs without MPI.
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace sluice {

class ReportCommand {
 public:
  void add(CLI::App& app);
  // After parsing: the exit code when `report` was chosen, else nullopt.
  std::optional<int> run() const;

 private:
  CLI::App* command_ = nullptr;
  std::string dir_;
};

}  // namespace sluice
