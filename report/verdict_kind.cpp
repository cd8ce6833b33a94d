#include "report/verdict_kind.h"

#include <array>
#include <utility>

namespace sluice::report {
namespace {

constexpr std::array<std::pair<VerdictKind, std::string_view>, 13> kind_names = {{
    {VerdictKind::input_bound, "input_bound"},
    {VerdictKind::compute_bound, "compute_bound"},
    {VerdictKind::communication_bound, "communication_bound"},
    {VerdictKind::straggler, "straggler"},
    {VerdictKind::cyclic_stall, "cyclic_stall"},
    {VerdictKind::hang, "hang"},
    {VerdictKind::descheduled, "descheduled"},
    {VerdictKind::padding, "padding"},
    {VerdictKind::restarts, "restarts"},
    {VerdictKind::stopped, "stopped"},
    {VerdictKind::no_verdict, "no_verdict"},
    {VerdictKind::balanced, "balanced"},
    {VerdictKind::write_bound, "write_bound"},
}};

constexpr std::array<std::pair<Severity, std::string_view>, 3> severity_names = {{
    {Severity::none, ""},
    {Severity::moderate, "MODERATE"},
    {Severity::high, "HIGH"},
}};

template <typename Enum, size_t N>
std::string_view name_of(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  return "?";
}

template <typename Enum, size_t N>
std::optional<Enum> value_of(const std::array<std::pair<Enum, std::string_view>, N>& names, std::string_view name) {
  for (const auto& [v, n] : names) {
    if (n == name) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string_view to_string(VerdictKind kind) { return name_of(kind_names, kind); }
std::optional<VerdictKind> verdict_kind_from(std::string_view name) { return value_of(kind_names, name); }
std::string_view to_string(Severity severity) { return name_of(severity_names, severity); }
std::optional<Severity> severity_from(std::string_view name) { return value_of(severity_names, name); }

}  // namespace sluice::report
