#include "report/rank_role.h"

namespace sluice::report {

std::string_view to_string(RoleKind kind) {
  switch (kind) {
    case RoleKind::data: return "data";
    case RoleKind::model: return "model";
    case RoleKind::data_and_model: return "data_and_model";
    case RoleKind::prep: return "prep";
    case RoleKind::unknown: break;
  }
  return "unknown";
}

RankRole RankRole::of(std::string_view recorded) {
  RankRole role;
  role.recorded = std::string(recorded);
  constexpr std::string_view python = " (python)";
  std::string_view base = recorded;
  if (base.size() > python.size() && base.substr(base.size() - python.size()) == python) {
    role.python = true;
    base.remove_suffix(python.size());
  }
  if (base == "data") role.kind = RoleKind::data;
  if (base == "model") role.kind = RoleKind::model;
  if (base == "data+model" || base == "data_and_model") role.kind = RoleKind::data_and_model;
  if (base == "prep") role.kind = RoleKind::prep;
  return role;
}

}  // namespace sluice::report
