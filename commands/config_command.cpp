#include "commands/config_command.h"

#include <iostream>

#include "runtime/settings.h"

namespace sluice {

void ConfigCommand::add(CLI::App& app) {
  auto* config = app.add_subcommand("config", "Show the configuration schema or an effective configuration");
  config->require_subcommand(1);
  reference_ = config->add_subcommand("reference", "Every setting with its type, default and meaning (Markdown)");
  show_ = config->add_subcommand("show", "The effective configuration after the file and --set overrides (YAML)");
  show_config_.attach(*show_);
}

std::optional<int> ConfigCommand::run() const {
  if (*reference_) {
    std::cout << "# sluice configuration reference\n" << runtime::settings_schema().reference_markdown();
    return 0;
  }
  if (*show_) {
    std::cout << show_config_.load().to_yaml();
    return 0;
  }
  return std::nullopt;
}

}  // namespace sluice
