#pragma once
// The run directory's side of checkpoints: RUN_DIR/checkpoints/step-N.pt files (their contents
// are the model's: model::Trainer::save_checkpoint / load_checkpoint) and latest.json, the
// position of the newest, written atomically after it. The first model rank writes them.
#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "runtime/train/plan_schedule.h"

namespace sluice::model {
class Trainer;
}

namespace sluice::runtime {

class Checkpoints {
 public:
  explicit Checkpoints(const std::filesystem::path& run_dir);

  // latest.json, or nullopt when no checkpoint was written.
  std::optional<nlohmann::json> latest() const;
  // Writes step-<global_step>.pt, then latest.json (`position` plus the file name); keeps the
  // last three checkpoint files.
  void save(const model::Trainer& trainer, const nlohmann::json& position);
  // The checkpoint file `latest` names.
  std::filesystem::path file(const nlohmann::json& latest) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// Where the run is at `global_step`, as a checkpoint records it (PlanSchedule::record): the global
// step, its epoch and step, the plan's fingerprint and model-rank count, and the segments of the
// epoch trained before an elastic resume (epoch_segments: [{model_ranks, steps}, ...]).
nlohmann::json checkpoint_position(const PlanSchedule& schedule, int64_t global_step);

// --resume: the latest checkpoint's position in `run_dir`; anchors `schedule` there
// (PlanSchedule::resume: the same plan, or the rest of the epoch on another model-rank count,
// then "elastic" is true in the result). Throws ConfigError when there is no checkpoint or the
// plan differs from the checkpoint's in more than the number of model ranks.
nlohmann::json resume_position(const std::filesystem::path& run_dir, PlanSchedule& schedule);

}  // namespace sluice::runtime
