#include "commands/train_command.h"

#include <algorithm>

#include "common/mpi_session.h"
#include "common/stop_signal.h"
#include "runtime/train/libtorch_parts.h"
#include "runtime/train/train_job.h"
#include "runtime/train/train_settings.h"

namespace sluice {

static_assert(runtime::train_stopped == 4, "docs/operations.md documents 4");

void TrainCommand::add(CLI::App& app) {
  command_ = app.add_subcommand("train", train_summary);
  config_.attach(*command_);
  command_->add_option("--cache", cache_, "cache directory made by `sluice prep` (sets cache.dir)");
  command_->add_option("--mixture", mixture_,
                       "several caches in one run, \"DIR:WEIGHT, DIR:WEIGHT, ...\" (sets train.mixture; replaces "
                       "--cache; the caches must share features, see train.mixture_temperature)");
  command_->add_option("--run-dir", run_dir_, "run directory for checkpoints and timings (sets train.run_dir)");
  command_->add_option("--steps", steps_, "global steps to train (sets train.steps; 0 = train.epochs whole epochs)")
      ->check(non_negative());
  command_->add_flag("--resume", resume_,
                     "continue from the newest good checkpoint in RUN_DIR/checkpoints/ (latest.json's, unless "
                     "it is damaged) with the next unseen batch");
  command_->add_flag("--overwrite", overwrite_,
                     "start a new run in a RUN_DIR that holds an earlier run's checkpoints: deletes them, its "
                     "ranks/ and timeline/ files and its report first (without it, such a RUN_DIR is refused with exit "
                     "code 2); not with --resume");
  command_->footer("Writes RUN_DIR/checkpoints/, RUN_DIR/ranks/rank-N.json, RUN_DIR/timeline/rank-N.json (every stage of "
                   "every rank) and, from rank 0 at the end, the bottleneck report: report.md, report.json, report.html, "
                   "trace.json (`sluice report RUN_DIR` rewrites it offline).\n"
                   "Exit codes: 0 done; 1 failed (a rank, its host and what it waited for, or the damaged "
                   "shard, are named); 2 bad option or config, or a features.*/text.*/cache setting that "
                   "disagrees with the cache's manifest, or train.mixture caches with different features; 4 stopped by SIGTERM/SIGUSR1 after writing a checkpoint "
                   "(rerun with --resume; under mpirun send SIGUSR1 to mpirun: it answers SIGTERM itself, "
                   "with exit code 1, see docs/operations.md).");
}

int TrainCommand::run(MpiSession& session, double& abort_grace_s) const {
  install_stop_signal_handlers();
  auto settings = config_.load();
  abort_grace_s = runtime::abort_grace_s(settings.number("runtime.timeout_s"));
  if (!cache_.empty()) settings.set("cache.dir", cache_, "--cache");
  if (!mixture_.empty()) settings.set("train.mixture", mixture_, "--mixture");
  if (!run_dir_.empty()) settings.set("train.run_dir", run_dir_, "--run-dir");
  if (steps_ >= 0) settings.set("train.steps", std::to_string(steps_), "--steps");
  runtime::TrainOptions options;
  options.resume = resume_;
  options.overwrite = overwrite_;
  options.torch = &runtime::libtorch_parts();  // the C++ model ranks
  return runtime::run_train(session, settings, options);
}

}  // namespace sluice
