#pragma once
// The run directory's side of checkpoints, RUN_DIR/checkpoints/:
//
//   step-NNNNNNNNNN.pt    the trainer's state after global step N (model::Trainer::checkpoint_bytes)
//   step-NNNNNNNNNN.json  its record: the position (global_step, epoch, step, plan), the .pt's
//                         name ("file"), size ("bytes") and XXH64 of its bytes ("xxh64")
//   latest.json           a copy of the newest record
//
// The first model rank writes them in that order, each under a temporary name, fsync'd and
// renamed, then fsyncs the directory, and only then deletes checkpoints older than the last
// three. So a kill at any moment leaves every published file whole; what it can leave is a
// temporary (*.tmp-PID, removed by the next save) or a .pt without its record (never resumed
// from). A checkpoint is only made from a finite state (the trainer refuses otherwise).
//
// --resume takes the newest checkpoint whose file matches its record (size and checksum). Each
// newer one it passes over is named in a warning with what is wrong (expected vs actual), as is a
// latest.json that is not JSON; the next save sets such leftovers aside as *.damaged, so that
// they are neither resumed from nor counted by the retention. Checkpoints written before records
// existed (latest.json without "xxh64") are resumed from unverified, with a warning.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/train/plan_schedule.h"

namespace sluice::runtime {

class Checkpoints {
 public:
  explicit Checkpoints(const std::filesystem::path& run_dir);

  // latest.json, or nullopt when no checkpoint was written. Throws ConfigError naming the file
  // when it is not JSON (newest_good() falls back to the records instead).
  std::optional<nlohmann::json> latest() const;
  // Writes `bytes` (the trainer's state, model::Trainer::checkpoint_bytes(position), which refuses
  // a state that is not finite: the caller makes them first, so that nothing is written then) as
  // step-<global_step>.pt, its record, then latest.json (`position` plus the file's name, size
  // and checksum); sets aside checkpoints of later steps (a resume passed over them) and keeps
  // the last three.
  void save(const std::string& bytes, const nlohmann::json& position);
  // The checkpoint file a record (or latest.json) names.
  std::filesystem::path file(const nlohmann::json& record) const;
  const std::filesystem::path& dir() const { return dir_; }

  // The checkpoint files (step-*.pt) in dir(), oldest step first.
  std::vector<std::filesystem::path> files() const;
  // The record of the newest checkpoint whose file matches it (see above); with `warn`, logs
  // each one passed over and why. Throws ConfigError when there is no checkpoint, or naming every
  // damaged one when none is good. Reads (and hashes) the files it checks.
  nlohmann::json newest_good(bool warn) const;
  // The bytes of the file `record` names, after checking its size and checksum against the
  // record; throws Error naming the file, the expected and the actual values.
  std::string read_verified(const nlohmann::json& record) const;
  // Deletes every file of the checkpoints (records, latest.json, set-aside and temporary files);
  // returns how many checkpoint files (.pt) it deleted.
  int remove_all() const;

 private:
  std::filesystem::path dir_;
};

// Where the run is at `global_step`, as a checkpoint records it (PlanSchedule::record): the global
// step, its epoch and step, the plan's fingerprint and model-rank count, the segments of the
// epoch trained before an elastic resume (epoch_segments: [{model_ranks, steps}, ...]), the
// plan's version (plan_version, kBatchPlanVersion; absent before version 2) and the samples
// carried into the epoch (carried: cache indices, fewer than the model ranks).
nlohmann::json checkpoint_position(const PlanSchedule& schedule, int64_t global_step);

// --resume: the newest good checkpoint's record in `run_dir` (Checkpoints::newest_good); anchors
// `schedule` there (PlanSchedule::resume: the same plan, or the rest of the epoch on another
// model-rank count, then "elastic" is true in the result). Throws ConfigError when there is no
// good checkpoint, the checkpoint is of another plan version, or the plan differs from the
// checkpoint's in more than the number of model ranks. `warn`: log what was passed over (one rank says it).
nlohmann::json resume_position(const std::filesystem::path& run_dir, PlanSchedule& schedule, bool warn = true);

// A run without --resume must not mix its checkpoints with an earlier run's: throws ConfigError
// (naming the run directory, how many checkpoints it holds and the ways out) when `run_dir` holds
// checkpoints, unless `overwrite`; then, where `remove` (one rank), deletes the earlier run's
// checkpoints, per-rank stats, timelines and report first. Every rank calls it, before writing
// anything into `run_dir`.
void claim_fresh_run_dir(const std::filesystem::path& run_dir, bool overwrite, bool remove);

// An earlier attempt's per-rank files (ranks/, timeline/) and report in `run_dir` would mix into
// this run's report: a run resumed on fewer ranks once reported the earlier run's model ranks as
// its own. Moves them to RUN_DIR/attempts/N/ (N = 1, 2, ... the next free), keeping every byte,
// and returns that folder, or an empty path when there was nothing to move. Rank 0, before any
// rank writes these files (they are written at the end of the run).
std::filesystem::path set_aside_earlier_attempt(const std::filesystem::path& run_dir);

}  // namespace sluice::runtime
