#pragma once
// A debugging aid with known answers: sleeps inside one stage on chosen ranks, on every batch or
// every k-th, so that the report's verdicts can be checked against a cause put there on purpose
// (docs/report.md, "Checking the report"). Settings: debug.delay_stage, debug.delay_ranks,
// debug.delay_ms, debug.delay_every. Off unless debug.delay_stage is set.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/stage.h"

namespace sluice::timing {

struct InjectedDelay {
  std::optional<Stage> stage;  // none: off
  std::vector<int> ranks;      // empty: every rank
  double milliseconds = 0;
  int64_t every = 1;           // the delay hits items every-1, 2*every-1, ...

  // From the settings' text; throws ConfigError naming the setting on a bad value.
  static InjectedDelay parse(const std::string& stage, const std::string& ranks, double milliseconds,
                             int64_t every);
  // Whether `rank` sleeps in `stage` at all.
  bool applies(Stage stage, int rank) const;
  // Sleeps when `stage` is the delayed one on this rank and item `index` (a global step, a
  // corpus row) is one of the delayed ones.
  void apply(Stage stage, int rank, int64_t index) const;
  nlohmann::json to_json() const;  // null when off
};

}  // namespace sluice::timing
