#include "timing/injected_delay.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace sluice::timing {

InjectedDelay InjectedDelay::parse(const std::string& stage, const std::string& ranks, double milliseconds,
                                   int64_t every) {
  InjectedDelay delay;
  if (stage.empty()) return delay;
  delay.stage = stage_from_string(stage);
  if (!delay.stage) {
    std::string names;
    for (int i = 0; i < stage_count; ++i) names += (i ? ", " : "") + std::string(to_string(static_cast<Stage>(i)));
    throw ConfigError("debug.delay_stage: '" + stage + "' is not a stage; use one of " + names);
  }
  std::stringstream stream(ranks);
  for (std::string item; std::getline(stream, item, ',');) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    try {
      delay.ranks.push_back(std::stoi(item));
    } catch (const std::exception&) {
      throw ConfigError("debug.delay_ranks: '" + item + "' is not a rank number; give e.g. 0,2");
    }
  }
  if (every < 1) throw ConfigError("debug.delay_every must be at least 1 (1 = every item)");
  delay.milliseconds = milliseconds;
  delay.every = every;
  return delay;
}

bool InjectedDelay::applies(Stage which, int rank) const {
  if (!stage || *stage != which || milliseconds <= 0) return false;
  return ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

void InjectedDelay::apply(Stage which, int rank, int64_t index) const {
  if (!applies(which, rank) || (index + 1) % every != 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(milliseconds));
}

nlohmann::json InjectedDelay::to_json() const {
  if (!stage) return nullptr;
  return {{"stage", to_string(*stage)}, {"ranks", ranks}, {"milliseconds", milliseconds}, {"every", every}};
}

}  // namespace sluice::timing
