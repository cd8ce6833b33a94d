#pragma once
// In-job restart: `sluice supervise` runs a training job under mpirun or srun, and when a rank
// dies or is declared silent it starts the job again within the same allocation, from the last
// checkpoint with --resume, up to --max-restarts times. It is not a rank of the job: a process
// beside the launcher (under Slurm, in the batch script), so it outlives any rank and any node
// but its own, and needs no MPI.
//
// A round is one launch: `mpirun [--host KEPT] -np N ... sluice train ARGS --run-dir R [--resume]`
// or `srun --mpi=pmix --kill-on-bad-exit=1 [--nodes K --ntasks N --exclude LEFT_OUT] ...`. The
// supervisor reads every line the round prints (and passes it on unchanged, stdout to stdout,
// stderr to stderr) to learn what ended it (round_fault.h) and when training is going again;
// the host roster (host_roster.h) decides which hosts the next round leaves out, so that it is an
// elastic resume on fewer ranks (docs/operations.md, "Resuming on a different number of nodes").
//
// What ends the supervision, and its exit code (docs/operations.md, "Exit codes"):
//   the round exits 0, 2, 3, 4 or 5       that code: done, or not a fault a restart can mend
//                                         (a bad setting, a checkpointed stop, a full disk)
//   the supervisor got SIGTERM/SIGUSR1/   passed on to the launcher (so the ranks checkpoint and
//   SIGINT                                exit 4); the round's code, and no restart
//   a failed round after max_restarts     1, naming the last fault
//   a round would have < min_model_ranks  1, naming the hosts left out and why
//
// RUN_DIR/restarts.json (format "sluice-restarts/1", rewritten atomically after every change):
//   {format, launcher, max_restarts, min_model_ranks, leave_out_after, outcome, message,
//    rounds:   [{round, started_at_s, ended_at_s, exit_code, ranks, model_ranks, resume}],
//    restarts: [{after_round, fault: {kind, rank, host, signal|exit_code|silent_s, words},
//                failed_at_s, detected_at_s, relaunched_at_s, training_at_s, lost_s,
//                resumed_from_step, failed_round_last_step, first_step_again, left_out}],
//    left_out: [{host, why}]}
// Times are Unix seconds. lost_s = training_at_s - failed_at_s: from the fault (for a silent rank,
// the moment it went silent: when it was named less its silence) to the first step line of the
// next round (train.log_every decides how soon that is printed). Bounded: at most
// max_restarts + 1 rounds (max_restarts <= 100) and one entry per host left out.
#include <filesystem>
#include <string>
#include <vector>

namespace sluice::supervisor {

struct SupervisorOptions {
  std::string launcher = "mpirun";           // mpirun | srun
  std::string hosts;                         // "a:3,b:3"; empty: the launcher's own placement
  int ranks = 0;                             // mpirun -np without hosts (0: the launcher decides)
  std::vector<std::string> launcher_args;    // more arguments for mpirun/srun
  std::string sluice;                        // the binary every rank runs
  std::vector<std::string> train_args;       // `train` and its options, without --run-dir
  std::filesystem::path run_dir;
  int max_restarts = 3;
  int min_model_ranks = 1;
  int leave_out_after = 2;                   // 0: never by count
  int data_per_node = -1;                    // as roles.data_per_node, to count model ranks
};

// Runs rounds until one ends the supervision; returns the exit code (above). Throws ConfigError
// for options that cannot work (an unknown launcher, a bad host list, too few ranks at the start).
int supervise(const SupervisorOptions& options);

}  // namespace sluice::supervisor
