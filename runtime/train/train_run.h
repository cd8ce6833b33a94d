#pragma once
// What the pieces of one `sluice train` run share (train_job.cpp sets them up; the model loop
// and the role runners read them): the plan every rank computed alike, and what a rank carries
// through the run besides it.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/feature_transform.h"
#include "runtime/train/finish_line.h"
#include "runtime/train/plan_schedule.h"
#include "runtime/train/role_plan.h"
#include "runtime/train/status_board.h"
#include "timing/injected_delay.h"

namespace sluice::runtime {

class ProgressWatchdog;  // runtime/train/progress_watchdog.h

// Everything a rank needs to know about the run, computed identically everywhere.
struct RunSetup {
  RolePlan roles;
  std::vector<int> model_ranks;  // model_ranks[i] trains plan column i
  std::unique_ptr<PlanSchedule> schedule;
  std::vector<PlanSample> validation;
  int64_t first_step = 0;
  int64_t end_step = 0;
  std::optional<nlohmann::json> resume_from;  // --resume: the latest checkpoint's position

  // `rank`'s place among the model ranks (its plan column); -1 for a rank that trains nothing.
  int model_index_of(int rank) const {
    const auto it = std::find(model_ranks.begin(), model_ranks.end(), rank);
    return it == model_ranks.end() ? -1 : static_cast<int>(it - model_ranks.begin());
  }
};

// What a rank carries through the run besides the plan: its live status, its signs of life for
// the end of the run, the all-reduce baseline, the debug delay, and whom it was waiting for when a
// wait failed (for the timeline of a failed run).
struct RankContext {
  StatusBoard* status = nullptr;
  // Model ranks with peers: measures the all-reduce baseline for `floats` gradient values.
  std::function<double(size_t floats)> measure_allreduce;
  FinishLine* finish = nullptr;
  // runtime.timeouts: measured, on a data rank and a C++ model rank: its own progress is reported
  // to it (stepped(), phases); nullptr otherwise.
  ProgressWatchdog* watchdog = nullptr;
  timing::InjectedDelay delay;
  int waiting_for = -1;
  // This rank's share of the node's cores: libtorch's thread pool on a C++ model rank; a Python
  // model rank's script is told it (feed.compute_threads).
  int compute_threads = 1;
  // train.normalize_mels and the masks, with the cache's statistics (feature_settings()).
  model::FeatureTransformSettings features;
  // The run stopped early on purpose: the model ranks agreed to stop after a stop signal reached
  // any rank (this one, another model rank, or a data rank: BatchHeader::data_rank_stop), or, on
  // a data rank, its model ranks closed their channels at such a stop. The rank's timeline then
  // says "stopped" and it exits train_stopped, whichever rank the signal reached.
  bool stopped = false;
};

}  // namespace sluice::runtime
