#pragma once
// The command line of `sluice train`: its options, which override the config's cache.dir,
// train.run_dir and train.steps, and the hand-over to the train job (runtime/train/train_job.h).
#include <optional>

#include "commands/command_options.h"

namespace sluice {
class MpiSession;

// `sluice train`'s one-line summary, listed by both executables' --help.
inline constexpr const char* train_summary =
    "Train on a prepared cache. Under `mpirun -np N` / `srun` every rank gets a role: data ranks read the cache "
    "and feed batches to model ranks, model ranks train with data parallelism. One process (no mpirun) feeds "
    "itself from a thread.";

class TrainCommand {
 public:
  // Adds `train` and its options to `app`.
  void add(CLI::App& app);
  bool chosen() const { return command_ != nullptr && *command_; }
  // runtime.timeout_s of the config given (its default when it does not load).
  double join_timeout_s() const { return config_.timeout_s(); }
  // After parsing, when chosen: the train job's exit code. `abort_grace_s` is set from
  // runtime.timeout_s as soon as the settings are read.
  int run(MpiSession& session, double& abort_grace_s) const;

 private:
  CLI::App* command_ = nullptr;
  ConfigOptions config_;
  std::string cache_, mixture_, run_dir_;
  long long steps_ = -1;
  bool resume_ = false;
  bool overwrite_ = false;
};

}  // namespace sluice
