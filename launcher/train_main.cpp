// sluice-train: the executable with libtorch. It runs every command; `sluice` starts it for train,
// doctor and bench (launch.h says why the two are apart). This file adds those three commands to
// the shared command line.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "commands/bench_command.h"
#include "commands/doctor_command.h"
#include "common/mpi_session.h"
#include "common/stop_signal.h"
#include "launcher/launch.h"
#include "launcher/options.h"
#include "runtime/train/train_job.h"

namespace {

static_assert(sluice::runtime::train_stopped == 4, "docs/operations.md documents 4");

// `sluice train`: its options, which override the config's cache.dir, train.run_dir and
// train.steps.
struct TrainCommand {
  CLI::App* command = nullptr;
  sluice::launcher::ConfigOptions config;
  std::string cache, run_dir;
  long long steps = -1;
  bool resume = false;
  bool overwrite = false;

  void add(CLI::App& app) {
    command = app.add_subcommand("train", sluice::launcher::train_summary);
    config.attach(*command);
    command->add_option("--cache", cache, "cache directory made by `sluice prep` (sets cache.dir)");
    command->add_option("--run-dir", run_dir, "run directory for checkpoints and timings (sets train.run_dir)");
    command->add_option("--steps", steps, "global steps to train (sets train.steps; 0 = train.epochs whole epochs)")
        ->check(sluice::launcher::non_negative());
    command->add_flag("--resume", resume,
                      "continue from the newest good checkpoint in RUN_DIR/checkpoints/ (latest.json's, unless "
                      "it is damaged) with the next unseen batch");
    command->add_flag("--overwrite", overwrite,
                      "start a new run in a RUN_DIR that holds an earlier run's checkpoints: deletes them, its "
                      "ranks/ and timeline/ files and its report first (without it, such a RUN_DIR is refused with exit "
                      "code 2); not with --resume");
    command->footer("Writes RUN_DIR/checkpoints/, RUN_DIR/ranks/rank-N.json, RUN_DIR/timeline/rank-N.json (every stage of "
                    "every rank) and, from rank 0 at the end, the bottleneck report: report.md, report.json, report.html, "
                    "trace.json (`sluice report RUN_DIR` rewrites it offline).\n"
                    "Exit codes: 0 done; 1 failed (a rank, its host and what it waited for, or the damaged "
                    "shard, are named); 2 bad option or config, or a features.*/text.*/cache setting that "
                    "disagrees with the cache's manifest; 4 stopped by SIGTERM/SIGUSR1 after writing a checkpoint "
                    "(rerun with --resume; under mpirun send SIGUSR1 to mpirun: it answers SIGTERM itself, "
                    "with exit code 1, see docs/operations.md).");
  }

  // `abort_grace_s` is set from runtime.timeout_s as soon as the settings are read.
  int run(sluice::MpiSession& session, double& abort_grace_s) const {
    sluice::install_stop_signal_handlers();
    auto settings = config.load();
    abort_grace_s = std::clamp(0.5 * settings.number("runtime.timeout_s"), 1.0, 3.0);
    if (!cache.empty()) settings.set("cache.dir", cache, "--cache");
    if (!run_dir.empty()) settings.set("train.run_dir", run_dir, "--run-dir");
    if (steps >= 0) settings.set("train.steps", std::to_string(steps), "--steps");
    sluice::runtime::TrainOptions options;
    options.resume = resume;
    options.overwrite = overwrite;
    return sluice::runtime::run_train(session, settings, options);
  }
};

// train, doctor and bench (commands/).
class CommandsWithTorch : public sluice::launcher::TorchCommands {
 public:
  void add(CLI::App& app) override {
    train_.add(app);
    doctor_ = std::make_unique<sluice::DoctorCommand>(app);
    bench_ = std::make_unique<sluice::BenchCommand>(app);
  }

  std::optional<int> run_without_mpi() override { return bench_->run_without_mpi(); }

  double join_timeout_s() const override {
    // doctor and bench wait at MPI's start as train does, but read no config before it.
    return *train_.command ? train_.config.timeout_s() : sluice::launcher::ConfigOptions().timeout_s();
  }

  std::optional<int> run_with_mpi(sluice::MpiSession& session, double& abort_grace_s) override {
    if (const auto code = doctor_->run(session)) return *code;
    if (const auto code = bench_->run_with_mpi(session)) return *code;
    if (*train_.command) return train_.run(session, abort_grace_s);
    return std::nullopt;
  }

 private:
  TrainCommand train_;
  std::unique_ptr<sluice::DoctorCommand> doctor_;
  std::unique_ptr<sluice::BenchCommand> bench_;
};

}  // namespace

int main(int argc, char** argv) {
  CommandsWithTorch commands;
  return sluice::launcher::launch(argc, argv, &commands);
}
