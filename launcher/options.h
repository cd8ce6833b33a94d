#pragma once
// Command-line pieces that the commands of both executables use (launch.cpp, train_main.cpp).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "runtime/settings.h"

namespace sluice::launcher {

// A count option that must not be negative (CLI11 would parse "-5" as a value and let it through).
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (!value.empty() && value.front() == '-') return "must be 0 or more, not " + value;
        return {};
      },
      "", "NON-NEGATIVE");
}

// Options every job shares: the config file and --set overrides.
struct ConfigOptions {
  std::string file;
  std::vector<std::string> overrides;

  void attach(CLI::App& command) {
    command.add_option("-c,--config", file, "YAML config file; every key is optional (see `sluice config reference`)")
        ->check(CLI::ExistingFile);
    command.add_option("--set", overrides,
                       "override one setting, e.g. --set features.n_mels=100 (repeatable; applied after the file)")
        ->type_name("KEY=VALUE");
  }

  config::Config load() const { return config::Config::load(runtime::settings_schema(), file, overrides); }

  // runtime.timeout_s of this config, for the wait before MPI knows which rank says a bad config
  // (MpiSession's join watchdog): the setting's default when the config does not load (the command
  // says why once MPI is up).
  double timeout_s() const {
    try {
      return load().number("runtime.timeout_s");
    } catch (const std::exception&) {
      return config::Config::load(runtime::settings_schema(), "", {}).number("runtime.timeout_s");
    }
  }
};

}  // namespace sluice::launcher
