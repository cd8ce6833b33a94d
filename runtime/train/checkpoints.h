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
//
// Off the step's path. The periodic checkpoints of a run are written in the background
// (save_in_background): the step waits only while the trainer's state is copied into memory
// (serialised by the caller: on a GPU that includes the copy to the host); a writer thread then
// writes, fsyncs, publishes and prunes as above while training goes on. One write is in flight at
// a time (a second waits for the first), so memory holds at most one extra copy of the state. A
// kill during the write leaves the previous checkpoint as the newest: resume goes back one period.
#include <cstdint>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/train/plan_schedule.h"

namespace sluice::runtime {

class Checkpoints {
 public:
  explicit Checkpoints(const std::filesystem::path& run_dir);
  // Waits for a write in flight (its error, if any, is logged: a destructor cannot throw).
  ~Checkpoints();
  Checkpoints(const Checkpoints&) = delete;
  Checkpoints& operator=(const Checkpoints&) = delete;

  // latest.json, or nullopt when no checkpoint was written. Throws ConfigError naming the file
  // when it is not JSON (newest_good() falls back to the records instead).
  std::optional<nlohmann::json> latest() const;
  // Writes `bytes` (the trainer's state, model::Trainer::checkpoint_bytes(position), which refuses
  // a state that is not finite: the caller makes them first, so that nothing is written then) as
  // step-<global_step>.pt, its record, then latest.json (`position` plus the file's name, size
  // and checksum); sets aside checkpoints of later steps (a resume passed over them) and keeps
  // the last three. Waits for a background write in flight first.
  void save(const std::string& bytes, const nlohmann::json& position);
  // The same, on a writer thread (see "Off the step's path"): returns at once, after waiting for
  // the previous background write; throws that write's error, if it failed.
  void save_in_background(std::string bytes, nlohmann::json position);
  // Waits until the background write (if any) is published; throws its error (EnvironmentError
  // naming the file, for a full or read-only disk).
  void wait_written();
  // Seconds the background writes took so far (the run's summary); read after wait_written().
  double background_seconds() const { return background_seconds_; }
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
  // save()'s work: write, fsync, publish, prune.
  void write(const std::string& bytes, const nlohmann::json& position);

  std::filesystem::path dir_;
  std::future<void> writing_;  // the background write in flight; invalid when none
  double background_seconds_ = 0;
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
