#include "report/prep_analysis.h"

#include <algorithm>
#include <optional>
#include <set>

#include <spdlog/fmt/fmt.h>

namespace sluice::report {
namespace {

bool is_prep_stage(Stage stage) { return std::find(prep_stages.begin(), prep_stages.end(), stage) != prep_stages.end(); }

// A prep job that stopped on an error (a full or read-only disk, a bug): rank 0's summary names
// the reason (environment_error or failed), the rank, its host and the error text, which carries
// the file (runtime/prep/prep_job.cpp).
StallVerdict error_stop_verdict(const PrepAnalysis& a, const nlohmann::json& summary) {
  const std::string reason = summary.value("stop_reason", "failed");
  const std::string error = summary.value("error", "");
  const int rank = summary.value("error_rank", -1);
  const std::string host = summary.value("error_host", "");
  const bool environment = reason == "environment_error";
  StallVerdict v;
  v.kind = "stopped";
  v.severity = "HIGH";
  v.rank = rank;
  v.numbers = {{"reason", reason}, {"error", error}, {"error_rank", rank}, {"error_host", host},
               {"rejects", a.rejects}, {"corpus_rows", a.corpus_rows}};
  const std::string who = rank >= 0 ? fmt::format("rank {}{} failed", rank, host.empty() ? "" : " (host " + host + ")")
                                    : std::string("a rank failed");
  v.summary = fmt::format("the prep job stopped on {}, it did not hang: {}{}; no manifest was written",
                          environment ? "an error of its environment (disk, file system)" : "an error", who,
                          error.empty() ? " (its log has the error)" : ": " + error);
  v.recommendation = environment
                         ? "fix what the error names (free space on that file system, or a writable --out with room "
                           "for the cache), then rerun `sluice prep` with the same settings: finished shards are kept"
                         : "read the error above and the failed rank's log; rerun `sluice prep` with the same "
                           "settings once fixed: finished shards are kept";
  return v;
}

// A prep job that stopped on purpose (more rejects than prep.max_reject_fraction) or on an error:
// null when it did not stop. Read from the ranks' summaries (stop_reason, runtime/prep/prep_job.cpp)
// or, for timelines without one, from prep-report.json against the limit in the timelines' settings.
std::optional<StallVerdict> stop_verdict(const PrepAnalysis& a) {
  std::string reason, rejects_file;
  double limit = -1;
  for (const auto& t : a.timelines) {
    const std::string said = t.summary.value("stop_reason", "");
    if (said == "environment_error" || said == "failed") return error_stop_verdict(a, t.summary);
    if (reason.empty()) reason = said;
    if (rejects_file.empty()) rejects_file = t.summary.value("rejects_file", "");
    const nlohmann::json value = setting(t.settings, "prep.max_reject_fraction");
    if (value.is_number()) limit = value.get<double>();
  }
  const double fraction = a.corpus_rows > 0 ? static_cast<double>(a.rejects) / static_cast<double>(a.corpus_rows) : 0;
  if (reason.empty() && limit >= 0 && a.prep_report.is_object() && fraction > limit) reason = "too_many_rejects";
  if (reason != "too_many_rejects") return std::nullopt;
  if (rejects_file.empty()) rejects_file = "rejects.jsonl in the cache directory";
  std::vector<std::pair<int64_t, std::string>> by_count;
  for (const auto& [why, rows] : a.reject_reasons) by_count.emplace_back(rows, why);
  std::sort(by_count.rbegin(), by_count.rend());
  std::string top;
  for (size_t i = 0; i < by_count.size() && i < 3; ++i) {
    top += fmt::format("{}{} {}", top.empty() ? "" : ", ", by_count[i].second, by_count[i].first);
  }
  StallVerdict v;
  v.kind = "stopped";
  v.severity = "HIGH";
  v.numbers = {{"reason", reason},
               {"rejects", a.rejects},
               {"corpus_rows", a.corpus_rows},
               {"reject_fraction", fraction},
               {"max_reject_fraction", limit >= 0 ? nlohmann::json(limit) : nlohmann::json(nullptr)},
               {"rejects_file", rejects_file},
               {"reject_reasons", a.reject_reasons}};
  v.summary = fmt::format("the prep job stopped on purpose, it did not hang: {} of {} corpus rows were rejected "
                          "({:.1f}%), more than prep.max_reject_fraction = {}, so no manifest was written{}",
                          a.rejects, a.corpus_rows, 100 * fraction,
                          limit >= 0 ? fmt::format("{:.1f}%", 100 * limit) : std::string("?"),
                          top.empty() ? "" : "; rejects by reason: " + top);
  v.recommendation = fmt::format("read {} (every rejected row and its reason); fix those rows of the corpus, or raise "
                                 "prep.max_reject_fraction and rerun `sluice prep` (finished shards are kept)",
                                 rejects_file);
  return v;
}

}  // namespace

PrepAnalysis analyze_prep(const std::vector<RankTimeline>& timelines, const nlohmann::json& prep_report) {
  PrepAnalysis a;
  a.prep_report = prep_report;
  int64_t job_start = INT64_MAX, job_end = INT64_MIN;
  for (const auto& raw : timelines) {
    a.timelines.push_back(align_to_reference(raw));
    a.world_size = std::max({a.world_size, raw.world_size, raw.rank + 1});
    if (raw.clock.uncertainty_ns() > a.clock.max_uncertainty_ns) {
      a.clock.max_uncertainty_ns = raw.clock.uncertainty_ns();
      a.clock.worst_rank = raw.rank;
    }
  }
  std::map<int, nlohmann::json> report_ranks;
  if (prep_report.is_object()) {
    const nlohmann::json ranks = prep_report.value("ranks", nlohmann::json::array());
    for (const auto& r : ranks) report_ranks[r.value("rank", -1)] = r;
    const nlohmann::json reasons = prep_report.value("reject_reasons", nlohmann::json::object());
    for (const auto& [reason, count] : reasons.items()) {
      if (count.is_number()) a.reject_reasons[reason] = count.get<int64_t>();
    }
    a.rejects = prep_report.value("rejects", int64_t{0});
    a.corpus_rows = prep_report.value("corpus_rows", int64_t{0});
  }
  std::map<int, std::vector<double>> busy;
  int64_t total_rows = 0;
  for (const auto& t : a.timelines) {
    PrepRankAnalysis r;
    r.rank = t.rank;
    r.name = describe_rank(t);
    r.host = t.host;
    r.status = t.status;
    int64_t start = INT64_MAX, end = INT64_MIN;
    std::map<int64_t, double> per_row;
    for (const auto& s : t.spans) {
      if (!is_prep_stage(s.stage)) continue;
      start = std::min(start, s.start_ns);
      end = std::max(end, s.end_ns);
      const double seconds = static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
      r.stage_seconds[s.stage] += seconds;
      if (s.step >= 0) per_row[s.step] += seconds;
    }
    if (start < end) {
      r.window_seconds = static_cast<double>(end - start) * 1e-9;
      job_start = std::min(job_start, start);
      job_end = std::max(job_end, end);
    }
    r.rows = static_cast<int64_t>(per_row.size());
    total_rows += r.rows;
    for (const auto& [row, seconds] : per_row) r.row_busy_seconds.push_back(seconds);
    r.row_seconds = Distribution::of(r.row_busy_seconds);
    r.rows_per_second = r.window_seconds > 0 ? static_cast<double>(r.rows) / r.window_seconds : 0;
    const auto it = report_ranks.find(t.rank);
    if (it != report_ranks.end()) {
      r.audio_seconds = it->second.value("audio_seconds", -1.0);
      r.rejects = it->second.value("rejects", int64_t{-1});
      if (r.audio_seconds >= 0 && r.window_seconds > 0) r.audio_seconds_per_second = r.audio_seconds / r.window_seconds;
    }
    if (!r.row_busy_seconds.empty()) busy[t.rank] = r.row_busy_seconds;
    a.ranks.push_back(r);
  }
  if (job_start < job_end) a.job_seconds = static_cast<double>(job_end - job_start) * 1e-9;
  a.rows_per_second = a.job_seconds > 0 ? static_cast<double>(total_rows) / a.job_seconds : 0;
  a.hang = [&] {
    // The hang facts need only statuses, waiting_for and channels; reuse the train rule.
    TrainAnalysis t = analyze_train(timelines);
    return t.hang;
  }();

  // Stragglers: a rank's seconds per row against the other prep ranks' rows, pooled.
  std::vector<double> all_rows;
  for (const auto& [rank, values] : busy) all_rows.insert(all_rows.end(), values.begin(), values.end());
  const double row_median = median(all_rows);
  for (const auto& f : find_stragglers(busy, row_median)) {
    const auto& r = *std::find_if(a.ranks.begin(), a.ranks.end(), [&](const PrepRankAnalysis& x) { return x.rank == f.rank; });
    std::vector<double> windows;
    for (const auto& other : a.ranks) {
      if (other.rank != f.rank) windows.push_back(other.window_seconds);
    }
    const double late = r.window_seconds - median(windows);
    StallVerdict v;
    v.kind = "straggler";
    v.severity = "MODERATE";
    v.rank = f.rank;
    v.numbers = {{"rank", f.rank},
                 {"host", r.host},
                 {"role", "prep"},
                 {"row_seconds_p50", f.rank_median},
                 {"role_row_seconds_p50", f.role_median},
                 {"rows_over_threshold", f.flagged_share},
                 {"rows", f.items},
                 {"rows_per_second", r.rows_per_second},
                 {"finished_later_seconds", late}};
    v.summary = fmt::format("{} needs {:.4f} s per row against {:.4f} s on the other prep ranks in {:.0f}% of its {} "
                            "rows ({:.1f} rows/s); it finished {:.1f} s after the median rank",
                            r.name, f.rank_median, f.role_median, 100 * f.flagged_share, f.items, r.rows_per_second,
                            late);
    v.recommendation = fmt::format("check host {} (CPU load, the corpus's file system from that node); ranks ask for "
                                   "shards as they go, so the others already took on more of the work, and a rerun "
                                   "keeps every finished shard",
                                   r.host);
    a.verdicts.push_back(v);
  }
  const auto stopped = stop_verdict(a);
  if (stopped) a.verdicts.insert(a.verdicts.begin(), *stopped);
  // A stop on purpose is no hang; a missing rank still is.
  if (a.hang.any && (!stopped || !a.hang.missing_ranks.empty())) {
    StallVerdict v;
    v.kind = "hang";
    v.severity = "HIGH";
    v.rank = a.hang.culprit;
    v.numbers = {{"culprit", a.hang.culprit}, {"missing_ranks", a.hang.missing_ranks}};
    v.summary = a.hang.culprit >= 0 ? "the prep job did not finish; the rank that never arrived: " + a.hang.culprit_reason
                                    : "the prep job did not finish and no rank names whom it waited for";
    v.recommendation = "read that rank's log; rerun `sluice prep` with the same settings: finished shards are kept";
    a.verdicts.insert(a.verdicts.begin(), v);
  }
  if (a.verdicts.empty() && a.ranks.size() > 1) {
    const auto [slow, fast] = std::minmax_element(a.ranks.begin(), a.ranks.end(), [](const auto& x, const auto& y) {
      return x.rows_per_second < y.rows_per_second;
    });
    StallVerdict v;
    v.kind = "balanced";
    v.summary = fmt::format("no straggler: the slowest prep rank ({}) made {:.1f} rows/s, the fastest ({}) {:.1f} rows/s",
                            slow->name, slow->rows_per_second, fast->name, fast->rows_per_second);
    v.recommendation = "nothing to change";
    v.numbers = {{"slowest_rank", slow->rank}, {"fastest_rank", fast->rank}};
    a.verdicts.push_back(v);
  }
  return a;
}

}  // namespace sluice::report
