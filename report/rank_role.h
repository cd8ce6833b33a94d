#pragma once
// A rank's role as the report reasons about it: parsed once from the timeline's `role` field
// (timing/timeline_file.h) where the timeline is read, then carried as data. The recorded text
// stays beside it because the report shows it as written ("model (python)", "data+model").
#include <string>
#include <string_view>

namespace sluice::report {

enum class RoleKind { data, model, data_and_model, prep, unknown };

// report.json's name of the role: "data", "model", "data_and_model", "prep", "unknown".
std::string_view to_string(RoleKind kind);

struct RankRole {
  RoleKind kind = RoleKind::unknown;
  bool python = false;   // a Python model rank (sluice.Feed(), docs/python.md)
  std::string recorded;  // the timeline's text, shown as it is

  // The one reading of the timeline's text: "data", "model", "prep"; one process doing both is
  // "data+model" (the role plan's name, runtime/train/role_plan.cpp) or "data_and_model" (the
  // enum's, in earlier timelines); a Python model rank's role ends in " (python)". Anything else
  // is RoleKind::unknown.
  static RankRole of(std::string_view recorded);

  bool runs_model() const { return kind == RoleKind::model || kind == RoleKind::data_and_model; }
  bool feeds_batches() const { return kind == RoleKind::data || kind == RoleKind::data_and_model; }
};

}  // namespace sluice::report
