#include "commands/command_options.h"

#include "runtime/settings.h"

namespace sluice {

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (!value.empty() && value.front() == '-') return "must be 0 or more, not " + value;
        return {};
      },
      "", "NON-NEGATIVE");
}

void attach_config_options(CLI::App& command, std::string& file, std::vector<std::string>& overrides) {
  command.add_option("-c,--config", file, "YAML config file; every key is optional (see `sluice config reference`)")
      ->check(CLI::ExistingFile);
  command.add_option("--set", overrides,
                     "override one setting, e.g. --set features.n_mels=100 (repeatable; applied after the file)")
      ->type_name("KEY=VALUE");
}

config::Config ConfigOptions::load() const { return config::Config::load(runtime::settings_schema(), file, overrides); }

double ConfigOptions::timeout_s() const {
  try {
    return load().number("runtime.timeout_s");
  } catch (const std::exception&) {
    return config::Config::load(runtime::settings_schema(), "", {}).number("runtime.timeout_s");
  }
}

}  // namespace sluice
