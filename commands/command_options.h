#pragma once
// Command-line pieces every command uses: the config options (-c/--config and --set, loaded
// through the one settings schema) and a validator for counts.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"

namespace sluice {

// A count option that must not be negative (CLI11 would parse "-5" as a value and let it through).
CLI::Validator non_negative();

// Adds -c/--config (stored in `file`) and the repeatable --set (in `overrides`) to `command`.
void attach_config_options(CLI::App& command, std::string& file, std::vector<std::string>& overrides);

// The config options of a command that reads the settings as the jobs do.
struct ConfigOptions {
  std::string file;
  std::vector<std::string> overrides;

  void attach(CLI::App& command) { attach_config_options(command, file, overrides); }
  // The settings of `file` (empty: defaults) with `overrides` applied; ConfigError names the
  // file, line and key.
  config::Config load() const;
  // runtime.timeout_s of this config, for the wait before MPI knows which rank says a bad config
  // (MpiSession's join watchdog): the setting's default when the config does not load (the command
  // says why once MPI is up).
  double timeout_s() const;
};

}  // namespace sluice
