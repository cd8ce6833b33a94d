#include "commands/doctor_command.h"

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands/command_options.h"
#include "commands/doctor.h"
#include "common/config.h"
#include "common/error.h"
#include "common/mpi_session.h"

namespace sluice {

struct DoctorCommand::Options {
  CLI::App* doctor = nullptr;
  ConfigOptions config;
  std::string cache;
  runtime::DoctorOptions doctor_options;
  double read_mb = 1024;
};

DoctorCommand::DoctorCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;
  o.doctor = app.add_subcommand("doctor", doctor_summary);
  o.config.attach(*o.doctor);
  o.doctor->add_option("--cache", o.cache, "cache directory to check (sets cache.dir)");
  o.doctor->add_option("--ranks", o.doctor_options.ranks,
                       "plan the roles for this many ranks (default: this launch's ranks; 1 alone)")
      ->check(CLI::Range(1, 1 << 20));
  o.doctor->add_option("--nodes", o.doctor_options.nodes, "spread --ranks over this many nodes (default 1)")
      ->check(CLI::Range(1, 1 << 16));
  o.doctor->add_option("--gpus-per-node", o.doctor_options.gpus_per_node,
                       "plan with this many GPUs per node instead of those visible here (with model.device=cuda)")
      ->check(CLI::Range(0, 1024));
  o.doctor->add_flag("--verify", o.doctor_options.verify,
                     "also read every chunk of the cache and check its checksums (as `sluice cache verify`)");
  o.doctor->add_option("--read-mb", o.read_mb, "read at most this many MB of shards for the read speed (default 1024)")
      ->check(CLI::Range(1.0, 1e9));
  o.doctor->add_flag("--json", o.doctor_options.json, "print JSON instead of the table");
  o.doctor->footer("Exit codes: 0 nothing blocking (warnings and notes may be listed); 1 a blocking problem "
                   "(train would fail or could not start); 2 bad option.");
}

DoctorCommand::~DoctorCommand() = default;

std::optional<int> DoctorCommand::run(MpiSession& session) {
  Options& o = *options_;
  if (!*o.doctor) return std::nullopt;
  o.doctor_options.read_bytes = static_cast<int64_t>(o.read_mb * 1e6);
  std::string config_error;
  std::optional<config::Config> settings;
  try {
    settings = o.config.load();
    if (!o.cache.empty()) settings->set("cache.dir", o.cache, "--cache");
  } catch (const ConfigError& error) {
    config_error = error.what();
    settings.reset();
  }
  return runtime::run_doctor(session, settings ? &*settings : nullptr, config_error, o.doctor_options);
}

}  // namespace sluice
