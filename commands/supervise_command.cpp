#include "commands/supervise_command.h"

#include <cstdlib>

#include <CLI/CLI.hpp>

#include "common/error.h"

namespace sluice {

void SuperviseCommand::add(CLI::App& app) {
  command_ = app.add_subcommand(
      "supervise",
      "Run `sluice train` under mpirun or srun and restart it from its last checkpoint (--resume) when a rank dies "
      "or goes silent, within the same allocation, leaving out a host that keeps failing");
  command_->add_option("--run-dir", run_dir_, "the run directory (train's --run-dir); restarts.json is written there")
      ->required();
  command_->add_option("--launcher", options_.launcher,
                       "mpirun or srun (default: srun inside a Slurm job, else mpirun)");
  command_->add_option("--hosts", options_.hosts,
                       "the hosts and ranks per host, NAME:RANKS,... (mpirun --host; under srun the allocation's "
                       "nodes). Without it nothing can be left out");
  command_->add_option("-n,--ranks", options_.ranks, "ranks without --hosts (mpirun -np, srun --ntasks)");
  command_->add_option("--max-restarts", options_.max_restarts, "restarts after failed rounds, 0 to 100")
      ->capture_default_str();
  command_->add_option("--min-model-ranks", options_.min_model_ranks,
                       "stop (exit 1) rather than run a round with fewer model ranks")
      ->capture_default_str();
  command_->add_option("--leave-out-after", options_.leave_out_after,
                       "leave a host out once this many failed rounds named it (0: never by count); a rank "
                       "killed by a signal or a lost node leaves its host out at once where the rest hold "
                       "--min-model-ranks")
      ->capture_default_str();
  command_->add_option("--data-per-node", options_.data_per_node,
                       "as roles.data_per_node, to count the model ranks of a round (-1: one data rank on a host "
                       "with two or more ranks)")
      ->capture_default_str();
  command_->add_option("--launcher-arg", options_.launcher_args,
                       "one more argument for mpirun/srun (repeat it: --launcher-arg=--bind-to --launcher-arg=none)")
      ->allow_extra_args(false);
  command_->add_option("--sluice", options_.sluice, "the binary the ranks run (default: this one)");
  command_->add_option("TRAIN", options_.train_args, "after --: `train` and its options, without --run-dir")
      ->required();
  command_->footer(
      "Example: sluice supervise --hosts node1:4,node2:4 --max-restarts 3 --run-dir runs/a -- train --cache C\n"
      "Exit codes: the round's 0, 2, 4 or 5 (not restarted); 1 restarts exhausted or fewer than --min-model-ranks "
      "left (the message and RUN_DIR/restarts.json name the faults and hosts). docs/operations.md, \"In-job restart\".");
}

std::optional<int> SuperviseCommand::run(const std::string& self) const {
  if (!*command_) return std::nullopt;
  supervisor::SupervisorOptions options = options_;
  options.run_dir = run_dir_;
  if (options.sluice.empty()) options.sluice = self;
  if (command_->count("--launcher") == 0) options.launcher = std::getenv("SLURM_JOB_ID") != nullptr ? "srun" : "mpirun";
  if (options.train_args.empty() || options.train_args.front() != "train") {
    throw ConfigError("sluice supervise runs `train`: give it after --, e.g. `sluice supervise --run-dir R -- train "
                      "--cache C`");
  }
  for (const std::string& arg : options.train_args) {
    if (arg == "--run-dir" || arg.rfind("--run-dir=", 0) == 0) {
      throw ConfigError("give --run-dir to `sluice supervise`, before --: it passes it on to every round of train");
    }
  }
  return supervisor::supervise(options);
}

}  // namespace sluice
