#include "runtime/train/checkpoints.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/error.h"
#include "common/file_util.h"
#include "model/trainer.h"

namespace sluice::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

Checkpoints::Checkpoints(const fs::path& run_dir) : dir_(run_dir / "checkpoints") {}

std::optional<json> Checkpoints::latest() const {
  const fs::path path = dir_ / "latest.json";
  if (!fs::exists(path)) return std::nullopt;
  return json::parse(read_file(path));
}

void Checkpoints::save(const model::Trainer& trainer, const json& position) {
  fs::create_directories(dir_);
  char name[64];
  std::snprintf(name, sizeof(name), "step-%010lld.pt", static_cast<long long>(position["global_step"].get<int64_t>()));
  trainer.save_checkpoint(dir_ / name, position);
  json latest = position;
  latest["file"] = name;
  write_file_atomically(dir_ / "latest.json", latest.dump(2) + "\n");
  // Keep the last three: enough to survive one bad write, bounded on disk.
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().extension() == ".pt") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + 3 < files.size(); ++i) fs::remove(files[i]);
}

fs::path Checkpoints::file(const json& latest) const { return dir_ / latest["file"].get<std::string>(); }

json checkpoint_position(const PlanSchedule& schedule, int64_t global_step) {
  const PlanRecord record = schedule.record(global_step);
  json earlier = json::array();
  for (const EpochSegment& segment : record.earlier) {
    earlier.push_back({{"model_ranks", segment.model_ranks}, {"steps", segment.steps}});
  }
  return json{{"global_step", global_step}, {"epoch", record.at.epoch}, {"step", record.at.step},
              {"plan", record.fingerprint}, {"model_ranks", record.model_ranks}, {"epoch_segments", earlier}};
}

json resume_position(const fs::path& run_dir, PlanSchedule& schedule) {
  const Checkpoints checkpoints(run_dir);
  std::optional<json> latest = checkpoints.latest();
  if (!latest) {
    throw ConfigError("--resume: no checkpoint in " + checkpoints.dir().string() +
                      " (train.run_dir); start without --resume");
  }
  PlanRecord record;
  record.global_step = (*latest)["global_step"].get<int64_t>();
  record.at = {(*latest)["epoch"].get<int64_t>(), (*latest)["step"].get<int64_t>()};
  record.fingerprint = (*latest)["plan"].get<std::string>();
  record.model_ranks = latest->value("model_ranks", 0);  // absent before elastic resume
  for (const json& segment : latest->value("epoch_segments", json::array())) {
    record.earlier.push_back({segment["model_ranks"].get<int>(), segment["steps"].get<int64_t>()});
  }
  (*latest)["elastic"] = schedule.resume(record);
  return *latest;
}

}  // namespace sluice::runtime
