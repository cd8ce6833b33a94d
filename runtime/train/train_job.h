#pragma once
// `sluice train`: roles across ranks, the batch feed, data-parallel training on model ranks.
//
// Run protocol:
//  1. Every rank opens the cache (manifest + index only), splits train/validation by hashed id,
//     and computes the role plan and the batch plan: the same on every rank, no messages.
//     Rank 0 prints the role plan before anything runs.
//  2. Data ranks read, collate and send the plan's batches to the model ranks they feed (one
//     channel each, credits from the model rank). One process runs the data side on a thread
//     with an in-process channel.
//  3. Model ranks train each batch they receive, all-reducing gradients among themselves, log,
//     validate on their share of the validation split, and the first model rank checkpoints.
//  4. Resume (--resume) continues from the newest good checkpoint in RUN_DIR/checkpoints/ (the
//     one latest.json names unless it is damaged, checkpoints.h): model ranks load the
//     checkpoint, data ranks start the feed at its position: the next unseen batch. Without
//     --resume, a run directory holding checkpoints is refused unless --overwrite.
//  5. Preemption: on SIGTERM or SIGUSR1 the model ranks agree (a one-float all-reduce per step)
//     to stop after the current step; the first model rank checkpoints, the model ranks shut their
//     feed channels, and every rank exits with train_stopped. --resume continues from there.
// Every wait across ranks has the runtime.timeout_s deadline; a silent peer is named.
// Before step 1 every rank makes the start-up agreement of job_agreement.h (sluice and Python
// ranks; with Python model ranks, rank 0's config is everyone's).
//
// The pieces (docs/architecture.md, "Training", has the table): train_job.cpp sets up and
// dispatches by role; batch_feeder + data_side are the data side, model_loop the model side,
// checkpoints the run directory's checkpoints, train_settings the typed settings. All but the
// model loop are in sluice_train, which links no libtorch (torch_parts.h).
#include "common/config.h"
#include "common/mpi_session.h"
#include "runtime/train/job_agreement.h"
#include "runtime/train/model_side.h"
#include "runtime/train/torch_parts.h"

namespace sluice::runtime {

// Exit code of a run that a stop signal (SIGTERM, SIGUSR1) ended early, after checkpointing.
constexpr int train_stopped = 4;

struct TrainOptions {
  bool resume = false;
  // A run directory holding an earlier run's checkpoints is refused without --resume; with
  // overwrite, that run's checkpoints, per-rank files and report are deleted first.
  bool overwrite = false;
  // This process's kind and what it asks for: a sluice rank by default; a Python model rank's
  // process (embedded_model_rank.h) says python, its resume step and whether it has a config.
  RankAnnouncement announce;
  // Set on a Python model rank: runs this rank's model side in place of the C++ model loop.
  ModelSide model_side;
  // What this process has of libtorch (torch_parts.h): sluice-train's libtorch_parts(), which
  // the C++ model loop comes from; null in a Python model rank's process, which links none.
  const TorchParts* torch = nullptr;
};

int run_train(const MpiSession& session, const config::Config& config, const TrainOptions& options);

}  // namespace sluice::runtime
