// The restarts verdict and section: what the in-job restart loop did to this run
// (RUN_DIR/restarts.json, written by `sluice supervise`, supervisor/supervisor.h). Bounded: the
// file holds at most 101 rounds; the verdict names the first few faults and counts the rest.
#include <spdlog/fmt/fmt.h>

#include "common/printable.h"
#include "report/report_documents.h"
#include "report/stall_verdicts.h"

namespace sluice::report {
namespace {

using nlohmann::json;

constexpr size_t faults_named = 5;  // in the verdict's line; the section's table has them all

// "rank 2 (host a) killed by signal 9" from a restart's fault.
std::string fault_text(const json& fault) {
  const int rank = fault.value("rank", -1);
  const std::string host = fault.value("host", "");
  std::string who = rank >= 0 ? fmt::format("rank {}", rank) : "a rank";
  if (!host.empty()) who += rank >= 0 ? " (host " + host + ")" : " on host " + host;
  const std::string kind = fault.value("kind", "");
  if (kind == "silent") return fmt::format("{} silent for {:.1f} s", who, fault.value("silent_s", 0.0));
  if (kind == "stuck") return fmt::format("{} stuck (no progress) for {:.1f} s", who, fault.value("stuck_s", 0.0));
  if (kind == "killed") return fmt::format("{} killed by signal {}", who, fault.value("signal", 0));
  if (kind == "lost") return "host " + host + " lost";
  return fmt::format("{} exited with code {}", who, fault.value("exit_code", -1));
}

std::string seconds_or_dash(const json& value) {
  return value.is_number() ? fmt::format("{:.1f}", value.get<double>()) : "-";
}

std::string step_or_dash(const json& value) { return value.is_number_integer() ? std::to_string(value.get<int64_t>()) : "-"; }

}  // namespace

std::optional<StallVerdict> restart_verdict(const json& restarts) {
  if (!restarts.is_object()) return std::nullopt;
  const json list = restarts.value("restarts", json::array());
  const std::string outcome = restarts.value("outcome", "");
  if (list.empty()) return std::nullopt;
  double lost = 0, worst = 0;
  int measured = 0;
  std::string faults;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& r = list[i];
    if (r.value("lost_s", json()).is_number()) {
      lost += r["lost_s"].get<double>();
      worst = std::max(worst, r["lost_s"].get<double>());
      ++measured;
    }
    if (i < faults_named) {
      faults += fmt::format("{}{} in round {}", faults.empty() ? "" : "; ", fault_text(r.value("fault", json::object())),
                            r.value("after_round", 0));
    }
  }
  if (list.size() > faults_named) faults += fmt::format("; and {} more", list.size() - faults_named);
  std::string left_out;
  const json hosts = restarts.value("left_out", json::array());
  for (size_t i = 0; i < hosts.size() && i < faults_named; ++i) {
    left_out += (left_out.empty() ? "" : ", ") + hosts[i].value("host", std::string("?"));
  }
  if (hosts.size() > faults_named) left_out += fmt::format(" and {} more", hosts.size() - faults_named);
  const bool ended_badly = outcome == "gave_up" || outcome == "too_few_ranks";
  StallVerdict v(VerdictKind::restarts, ended_badly ? Severity::high : Severity::moderate);
  v.summary = fmt::format("{} restart(s) of {} allowed: {}; {:.1f} s lost from the faults to training again ({} "
                          "measured, the longest {:.1f} s){}{}",
                          list.size(), restarts.value("max_restarts", 0), faults, lost, measured, worst,
                          left_out.empty() ? "" : "; hosts left out: " + left_out,
                          ended_badly ? "; the supervisor stopped: " + restarts.value("message", std::string()) : "");
  v.recommendation = left_out.empty()
                         ? "see the faulty ranks' logs (restarts.json has each fault's words); lower "
                           "runtime.timeout_s to notice a silent rank sooner, train.checkpoint_every to lose fewer steps"
                         : "check or replace the hosts left out (restarts.json says why each), then resume on them";
  if (ended_badly) v.recommendation = "fix the cause named, then resume with --resume; " + v.recommendation;
  v.numbers = {{"restarts", list.size()},   {"lost_s", lost}, {"longest_lost_s", worst},
               {"left_out_hosts", hosts.size()}, {"outcome", outcome}};
  return v;
}

void restart_section(ReportDocument& doc, const json& restarts) {
  if (!restarts.is_object() || restarts.value("restarts", json::array()).empty()) return;
  doc.heading("Restarts (RUN_DIR/restarts.json)");
  DocumentTable table{{"round", "fault", "last step", "resumed from", "training again at", "lost s", "left out"},
                      {DocumentTable::Align::right, DocumentTable::Align::left, DocumentTable::Align::right,
                       DocumentTable::Align::right, DocumentTable::Align::right, DocumentTable::Align::right,
                       DocumentTable::Align::left},
                      {},
                      {}};
  for (const json& r : restarts["restarts"]) {
    table.rows.push_back({std::to_string(r.value("after_round", 0)), fault_text(r.value("fault", json::object())),
                          step_or_dash(r.value("failed_round_last_step", json())),
                          step_or_dash(r.value("resumed_from_step", json())),
                          step_or_dash(r.value("first_step_again", json())), seconds_or_dash(r.value("lost_s", json())),
                          r.value("left_out", json()).is_string() ? r["left_out"].get<std::string>() : "-"});
  }
  doc.table(std::move(table));
  for (const json& h : restarts.value("left_out", json::array())) {
    doc.paragraph("Host " + markdown_literal(h.value("host", "?")) + " left out: " + markdown_literal(h.value("why", "")));
  }
  if (!restarts.value("message", std::string()).empty()) doc.paragraph(markdown_literal(restarts["message"].get<std::string>()));
}

}  // namespace sluice::report
