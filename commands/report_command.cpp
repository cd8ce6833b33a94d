#include "commands/report_command.h"

#include <iostream>

#include <CLI/CLI.hpp>

#include "report/write_report.h"

namespace sluice {

void ReportCommand::add(CLI::App& app) {
  command_ = app.add_subcommand(
      "report", "Write the bottleneck report of a train run directory or a prep cache directory from its saved "
                "per-rank timelines (report.md, report.json, report.html, trace.json) and print the verdicts");
  command_->add_option("DIR", dir_, "train.run_dir of a `sluice train` run, or a `sluice prep` cache directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  command_->footer("Reads DIR/timeline/rank-N.json (every rank writes one at exit, and on a failure); train or prep "
                   "is told by the timelines' job. Rules and thresholds: docs/report.md.\nExit codes: 0 written; "
                   "1 no timelines in DIR/timeline, or a malformed one (named); 2 bad option or no such DIR.");
}

std::optional<int> ReportCommand::run() const {
  if (!*command_) return std::nullopt;
  std::cout << report::write_report(dir_);
  return 0;
}

}  // namespace sluice
