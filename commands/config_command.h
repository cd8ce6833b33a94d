#pragma once
// The command line of `sluice config reference|show`: the settings schema as Markdown, and the
// effective configuration after a file and --set overrides (YAML). Runs without MPI.
#include <optional>

#include "commands/command_options.h"

namespace sluice {

class ConfigCommand {
 public:
  void add(CLI::App& app);
  // After parsing: the exit code when `config reference` or `config show` was chosen, else nullopt.
  std::optional<int> run() const;

 private:
  CLI::App *reference_ = nullptr, *show_ = nullptr;
  ConfigOptions show_config_;
};

}  // namespace sluice
