#include "report/prep_analysis.h"

#include <algorithm>
#include <optional>
#include <set>

#include <spdlog/fmt/fmt.h>

#include "common/error.h"

namespace sluice::report {
namespace {

bool is_prep_stage(Stage stage) { return std::find(prep_stages.begin(), prep_stages.end(), stage) != prep_stages.end(); }

// A prep job that stopped on an error (a full or read-only disk, a bug): rank 0's summary names
// the reason (environment_error or failed), the rank, its host and the error text, which carries
// the file (runtime/prep/finalize.cpp).
StallVerdict error_stop_verdict(const PrepAnalysis& a, const nlohmann::json& summary) {
  const std::string reason = summary.value("stop_reason", "failed");
  const std::string error = summary.value("error", "");
  const int rank = summary.value("error_rank", -1);
  const std::string host = summary.value("error_host", "");
  const bool environment = reason == "environment_error";
  StallVerdict v(VerdictKind::stopped, Severity::high, rank);
  v.numbers = {{"reason", reason}, {"error", error}, {"error_rank", rank}, {"error_host", host},
               {"rejects", a.rejects}, {"corpus_rows", a.corpus_rows}};
  const std::string who = rank >= 0 ? fmt::format("rank {}{} failed", rank, host.empty() ? "" : " (host " + host + ")")
                                    : std::string("a rank failed");
  const bool memory = environment && is_memory_refusal(error);
  v.summary = fmt::format("the prep job stopped on {}, it did not hang: {}{}; no manifest was written",
                          memory        ? "an error of its environment (memory refused)"
                          : environment ? "an error of its environment (disk, file system)"
                                        : "an error",
                          who, error.empty() ? " (its log has the error)" : ": " + error);
  v.recommendation =
      memory        ? "give each prep rank more memory (the limits the error names) or fewer prep.threads, then "
                      "rerun `sluice prep` with the same settings: finished shards are kept"
      : environment ? "fix what the error names (free space on that file system, or a writable --out with room "
                      "for the cache), then rerun `sluice prep` with the same settings: finished shards are kept"
                    : "read the error above and the failed rank's log; rerun `sluice prep` with the same "
                      "settings once fixed: finished shards are kept";
  return v;
}

// A prep job that stopped on purpose (more rejects than prep.max_reject_fraction) or on an error:
// null when it did not stop. Read from the ranks' summaries (stop_reason, runtime/prep/coordinator.cpp)
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
  StallVerdict v(VerdictKind::stopped, Severity::high);
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

// prep-report.json's totals into `a`; its per-rank entries by rank.
std::map<int, nlohmann::json> read_prep_report(const nlohmann::json& prep_report, PrepAnalysis& a) {
  std::map<int, nlohmann::json> report_ranks;
  if (!prep_report.is_object()) return report_ranks;
  const nlohmann::json ranks = prep_report.value("ranks", nlohmann::json::array());
  for (const auto& r : ranks) report_ranks[r.value("rank", -1)] = r;
  const nlohmann::json reasons = prep_report.value("reject_reasons", nlohmann::json::object());
  for (const auto& [reason, count] : reasons.items()) {
    if (count.is_number()) a.reject_reasons[reason] = count.get<int64_t>();
  }
  a.rejects = prep_report.value("rejects", int64_t{0});
  a.corpus_rows = prep_report.value("corpus_rows", int64_t{0});
  return report_ranks;
}

// One prep rank from its aligned spans; `reported`: its prep-report.json entry (null if none).
// `start`/`end` widen to its first and last prep span.
PrepRankAnalysis analyze_prep_rank(const RankTimeline& t, const nlohmann::json& reported, int64_t& start,
                                   int64_t& end) {
  PrepRankAnalysis r;
  r.rank = t.rank;
  r.name = describe_rank(t);
  r.host = t.host;
  r.status = t.status;
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::map<int64_t, double> per_row;
  for (const auto& s : t.spans) {
    if (!is_prep_stage(s.stage)) continue;
    first = std::min(first, s.start_ns);
    last = std::max(last, s.end_ns);
    const double seconds = static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
    r.stage_seconds[s.stage] += seconds;
    if (s.step >= 0) per_row[s.step] += seconds;
  }
  if (first < last) {
    r.window_seconds = static_cast<double>(last - first) * 1e-9;
    start = std::min(start, first);
    end = std::max(end, last);
  }
  r.rows = static_cast<int64_t>(per_row.size());
  for (const auto& [row, seconds] : per_row) r.row_busy_seconds.push_back(seconds);
  r.row_seconds = Distribution::of(r.row_busy_seconds);
  r.rows_per_second = r.window_seconds > 0 ? static_cast<double>(r.rows) / r.window_seconds : 0;
  if (reported.is_object()) {
    r.audio_seconds = reported.value("audio_seconds", -1.0);
    r.rejects = reported.value("rejects", int64_t{-1});
    if (r.audio_seconds >= 0 && r.window_seconds > 0) r.audio_seconds_per_second = r.audio_seconds / r.window_seconds;
    const nlohmann::json stages = reported.value("stages", nlohmann::json::object());
    r.writer.workers = reported.value("workers", 0);
    r.writer.wall_seconds = reported.value("wall_seconds", 0.0);
    r.writer.write_seconds = stages.value("write", 0.0);
    r.writer.worker_busy_seconds = stages.value("decode", 0.0) + stages.value("text", 0.0) + stages.value("features", 0.0);
    r.writer.writer_cpu_seconds = reported.value("cpu_seconds", nlohmann::json::object()).value("writer", 0.0);
    r.writer.mel_bytes = reported.value("mel_bytes", int64_t{0});
  }
  return r;
}

// The write_bound rule's thresholds (docs/report.md, "The prep report"). A rank's writer busy for
// most of the rank's time while its workers wait is the rank's limit: each worker may run only a
// bounded window of rows ahead of the writer. Below kMinWallSeconds a rank's fixed costs (the
// first shard's create, the last commit's fsync) are too large a part to judge.
constexpr double kWriteBoundWriterShare = 0.8;   // writer busy >= 80% of the rank's wall time
constexpr double kWriteBoundWorkerShare = 0.6;   // workers busy <= 60% of theirs
constexpr double kWriteBoundHighWorkerShare = 0.3;
constexpr double kWriterWaitingCpuShare = 0.5;   // writer on the CPU < 50% of its busy time: it waits
constexpr double kMinWallSeconds = 1.0;

bool is_write_bound(const WriterFacts& w) {
  if (w.workers <= 0 || w.wall_seconds < kMinWallSeconds) return false;
  return w.write_seconds >= kWriteBoundWriterShare * w.wall_seconds &&
         w.worker_busy_seconds <= kWriteBoundWorkerShare * w.workers * w.wall_seconds;
}

double worker_share(const WriterFacts& w) { return w.worker_busy_seconds / (w.workers * w.wall_seconds); }

// One verdict for every write-bound rank, naming the one whose workers waited most; the count of
// the others keeps it one line at 4,096 ranks. The cause is the writer's CPU time against its busy
// time: a writer that mostly waited was held up by the storage under --out (its rate is the bytes
// over the busy time), one that mostly ran is out of CPU for its workers.
std::optional<StallVerdict> write_bound_verdict(const PrepAnalysis& a) {
  const PrepRankAnalysis* worst = nullptr;
  int bound = 0;
  double rate_together = 0;  // the bound ranks' rates summed: what their storage gave them at once
  for (const auto& r : a.ranks) {
    if (!is_write_bound(r.writer)) continue;
    ++bound;
    rate_together += r.writer.mel_bytes / r.writer.write_seconds;
    if (!worst || worker_share(r.writer) < worker_share(worst->writer)) worst = &r;
  }
  if (!worst) return std::nullopt;
  const WriterFacts& w = worst->writer;
  const double busy = worker_share(w);
  const double write_share = w.write_seconds / w.wall_seconds;
  const double cpu_share = w.writer_cpu_seconds / w.write_seconds;
  const bool storage = cpu_share < kWriterWaitingCpuShare;
  const double rate = w.mel_bytes / w.write_seconds;
  StallVerdict v(VerdictKind::write_bound, busy <= kWriteBoundHighWorkerShare ? Severity::high : Severity::moderate,
                 worst->rank);
  v.role = RoleKind::prep;
  v.numbers = {{"rank", worst->rank},
               {"host", worst->host},
               {"cause", storage ? "storage" : "writer_cpu"},
               {"write_bound_ranks", bound},
               {"prep_ranks", a.ranks.size()},
               {"workers", w.workers},
               {"wall_seconds", w.wall_seconds},
               {"write_seconds", w.write_seconds},
               {"write_fraction", write_share},
               {"writer_cpu_seconds", w.writer_cpu_seconds},
               {"writer_cpu_fraction", cpu_share},
               {"worker_busy_fraction", busy},
               {"mel_bytes", w.mel_bytes},
               {"write_bytes_per_s", rate},
               {"write_bytes_per_s_together", rate_together}};
  const std::string others =
      bound > 1 ? fmt::format(" ({} of the {} prep ranks alike, {:.2f} MB/s together)", bound, a.ranks.size(),
                              rate_together / 1e6)
                : std::string();
  const std::string workers = fmt::format("its {} {} busy {:.0f}% of the time", w.workers,
                                          w.workers == 1 ? "worker was" : "workers were", 100 * busy);
  if (storage) {
    v.summary = fmt::format("{}'s writer was busy {:.1f} s of the rank's {:.1f} s ({:.0f}%), on the CPU for only {:.2f} s "
                            "of it: it waited for the cache's storage, which took {:.1f} MB of mels at {:.2f} MB/s; {}{}",
                            worst->name, w.write_seconds, w.wall_seconds, 100 * write_share, w.writer_cpu_seconds,
                            w.mel_bytes / 1e6, rate / 1e6, workers, others);
    v.recommendation = "the storage under --out is the limit, not the CPU: write the cache to faster storage (node-local "
                       "disk, then copy it where training reads it) or lift the job's I/O limit (cgroup blkio/io.max); "
                       "more prep.threads will not help";
  } else {
    v.summary = fmt::format("{}'s writer was busy {:.1f} s of the rank's {:.1f} s ({:.0f}%), {:.0f}% of it on the CPU: one "
                            "writer cannot keep up with the rank's workers ({:.1f} MB of mels at {:.2f} MB/s); {}{}",
                            worst->name, w.write_seconds, w.wall_seconds, 100 * write_share, 100 * cpu_share,
                            w.mel_bytes / 1e6, rate / 1e6, workers, others);
    v.recommendation = "run more prep ranks per node with fewer prep.threads each (each rank has its own writer: "
                       "--ntasks-per-node up, --cpus-per-task down), or halve the bytes with cache.mel_dtype: float16";
  }
  return v;
}

StallVerdict prep_straggler_verdict(const PrepAnalysis& a, const StragglerFinding& f) {
  const auto& r = *std::find_if(a.ranks.begin(), a.ranks.end(), [&](const PrepRankAnalysis& x) { return x.rank == f.rank; });
  std::vector<double> windows;
  for (const auto& other : a.ranks) {
    if (other.rank != f.rank) windows.push_back(other.window_seconds);
  }
  const double late = r.window_seconds - median(windows);
  StallVerdict v(VerdictKind::straggler, Severity::moderate, f.rank);
  v.role = RoleKind::prep;
  v.numbers = {{"rank", f.rank},
               {"host", r.host},
               {"role", to_string(v.role)},
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
  return v;
}

// Stragglers: a rank's seconds per row against the other prep ranks' rows, pooled.
std::vector<StallVerdict> prep_straggler_verdicts(const PrepAnalysis& a) {
  std::map<int, std::vector<double>> busy;
  for (const auto& r : a.ranks) {
    if (!r.row_busy_seconds.empty()) busy[r.rank] = r.row_busy_seconds;
  }
  std::vector<double> all_rows;
  for (const auto& [rank, values] : busy) all_rows.insert(all_rows.end(), values.begin(), values.end());
  std::vector<StallVerdict> verdicts;
  for (const auto& f : find_stragglers(busy, median(all_rows))) verdicts.push_back(prep_straggler_verdict(a, f));
  return verdicts;
}

StallVerdict prep_hang_verdict(const HangFacts& hang) {
  StallVerdict v(VerdictKind::hang, Severity::high, hang.culprit);
  v.numbers = {{"culprit", hang.culprit}, {"missing_ranks", hang.missing_ranks}};
  v.summary = hang.culprit >= 0 ? "the prep job did not finish; the rank that never arrived: " + hang.culprit_reason
                                : "the prep job did not finish and no rank names whom it waited for";
  v.recommendation = "read that rank's log; rerun `sluice prep` with the same settings: finished shards are kept";
  return v;
}

// No other verdict: the slowest and the fastest rank, to show that they are close.
StallVerdict balanced_verdict(const PrepAnalysis& a) {
  const auto [slow, fast] = std::minmax_element(a.ranks.begin(), a.ranks.end(), [](const auto& x, const auto& y) {
    return x.rows_per_second < y.rows_per_second;
  });
  StallVerdict v(VerdictKind::balanced);
  v.summary = fmt::format("no straggler: the slowest prep rank ({}) made {:.1f} rows/s, the fastest ({}) {:.1f} rows/s",
                          slow->name, slow->rows_per_second, fast->name, fast->rows_per_second);
  v.recommendation = "nothing to change";
  v.numbers = {{"slowest_rank", slow->rank}, {"fastest_rank", fast->rank}};
  return v;
}

// A stop first (on purpose or on an error), then a hang unless the stop explains it (a missing
// rank still is one), then stragglers, then write-bound ranks; "balanced" when none holds.
std::vector<StallVerdict> prep_verdicts(const PrepAnalysis& a) {
  std::vector<StallVerdict> verdicts;
  const auto stopped = stop_verdict(a);
  if (a.hang.any && (!stopped || !a.hang.missing_ranks.empty())) verdicts.push_back(prep_hang_verdict(a.hang));
  if (stopped) verdicts.push_back(*stopped);
  for (auto& v : prep_straggler_verdicts(a)) verdicts.push_back(v);
  if (auto write_bound = write_bound_verdict(a)) verdicts.push_back(*write_bound);
  if (verdicts.empty() && a.ranks.size() > 1) verdicts.push_back(balanced_verdict(a));
  return verdicts;
}

}  // namespace

PrepAnalysis analyze_prep(const std::vector<RankTimeline>& timelines, const nlohmann::json& prep_report) {
  PrepAnalysis a;
  a.prep_report = prep_report;
  std::map<int, int64_t> last_steps;
  for (const auto& raw : timelines) {
    a.timelines.push_back(align_to_reference(raw));
    a.world_size = std::max({a.world_size, raw.world_size, raw.rank + 1});
    last_steps[raw.rank] = last_step_of(raw);
    if (raw.clock.uncertainty_ns() > a.clock.max_uncertainty_ns) {
      a.clock.max_uncertainty_ns = raw.clock.uncertainty_ns();
      a.clock.worst_rank = raw.rank;
    }
  }
  const std::map<int, nlohmann::json> report_ranks = read_prep_report(prep_report, a);
  int64_t job_start = INT64_MAX, job_end = INT64_MIN, total_rows = 0;
  for (const auto& t : a.timelines) {
    const auto reported = report_ranks.find(t.rank);
    a.ranks.push_back(analyze_prep_rank(t, reported == report_ranks.end() ? nlohmann::json() : reported->second,
                                        job_start, job_end));
    total_rows += a.ranks.back().rows;
  }
  if (job_start < job_end) a.job_seconds = static_cast<double>(job_end - job_start) * 1e-9;
  a.rows_per_second = a.job_seconds > 0 ? static_cast<double>(total_rows) / a.job_seconds : 0;
  // The same hang facts as a train run's (hang_facts.h), from the timelines aligned once above.
  a.hang = hang_facts(a.timelines, a.world_size, last_steps);
  a.verdicts = prep_verdicts(a);
  return a;
}

}  // namespace sluice::report
