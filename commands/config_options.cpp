#include "commands/config_options.h"

#include <CLI/CLI.hpp>

#include "runtime/settings.h"

namespace sluice {

void attach_config_options(CLI::App& command, std::string& file, std::vector<std::string>& overrides) {
  command.add_option("-c,--config", file, "YAML config file, as for `sluice train`")->check(CLI::ExistingFile);
  command.add_option("--set", overrides, "override one setting, e.g. --set train.batch_size=16 (repeatable)")
      ->type_name("KEY=VALUE");
}

config::Config load_settings(const std::string& file, const std::vector<std::string>& overrides) {
  return config::Config::load(runtime::settings_schema(), file, overrides);
}

}  // namespace sluice
