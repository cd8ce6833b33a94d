#pragma once
// The settings options of the commands that read a config as `sluice train` does (doctor, bench
// sweep, bench max-batch): -c/--config FILE and --set KEY=VALUE, loaded through the one schema.
#include <string>
#include <vector>

#include "common/config.h"

namespace CLI {
class App;
}

namespace sluice {

// Adds -c/--config (stored in `file`) and the repeatable --set (in `overrides`) to `command`.
void attach_config_options(CLI::App& command, std::string& file, std::vector<std::string>& overrides);

// The settings of `file` (empty: defaults) with `overrides` applied; ConfigError names the file,
// line and key.
config::Config load_settings(const std::string& file, const std::vector<std::string>& overrides);

}  // namespace sluice
