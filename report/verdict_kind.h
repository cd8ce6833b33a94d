#pragma once
// What a verdict is and how grave: types, so that the rules, their order and the writers compare
// values, not strings. Each has one to_string (the name report.json, report.md and report.html
// show: scripts read it, keep it) and one parse back, for readers of report.json and the tests.
#include <optional>
#include <string_view>

namespace sluice::report {

enum class VerdictKind {
  input_bound,
  compute_bound,
  communication_bound,
  straggler,
  cyclic_stall,
  hang,
  descheduled,
  padding,
  restarts,
  stopped,
  no_verdict,
  balanced,
  write_bound,
};

// "input_bound", "cyclic_stall", ...: report.json's `kind`.
std::string_view to_string(VerdictKind kind);
std::optional<VerdictKind> verdict_kind_from(std::string_view name);

// A finding without a grade (compute-bound, balanced, no verdict) has Severity::none.
enum class Severity { none, moderate, high };

// "HIGH", "MODERATE", "" for none: report.json's `severity` and report.html's CSS class.
std::string_view to_string(Severity severity);
std::optional<Severity> severity_from(std::string_view name);

}  // namespace sluice::report
