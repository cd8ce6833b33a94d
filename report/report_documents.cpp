#include "report/report_documents.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <spdlog/fmt/fmt.h>

#include "common/printable.h"
#include "report/report_document.h"
#include "report/report_text.h"

namespace sluice::report {
namespace {

using nlohmann::json;


// The bytes a rank fetched from block devices in the window; "-" when not measured.
std::string storage_read_text(const RankCpu& c) {
  return c.storage_measured ? bytes_text(static_cast<double>(c.storage_read_bytes)) : "-";
}

json stages_json(const std::map<Stage, StageBreakdown>& stages) {
  json j = json::object();
  for (const auto& [stage, b] : stages) j[stage_name(stage)] = {{"per_step", b.per_step.to_json()}, {"fraction", b.fraction}};
  return j;
}

json clock_json(const ClockSummary& c) {
  return {{"max_uncertainty_ns", c.max_uncertainty_ns},
          {"worst_rank", c.worst_rank},
          {"causality",
           {{"pairs_checked", c.causality.pairs_checked},
            {"violations", c.causality.violations},
            {"violations_unaligned", c.causality.violations_unaligned},
            {"worst_violation_ns", c.causality.worst_violation_ns},
            {"example", c.causality.example}}}};
}

json rank_fate_json(const RankFate& f) {
  return {{"rank", f.rank},         {"name", f.name},           {"status", f.status},    {"error", f.error},
          {"waiting_for", f.waiting_for}, {"last_step", f.last_step}, {"channels", f.channels}};
}

// A fate per rank: made one at a time as report.json is written (streamed_json.h).
StreamedJson hang_json(const HangFacts& h) {
  StreamedJson j;
  j.members = {{"any", h.any},
               {"culprit", h.culprit},
               {"reason", h.culprit_reason},
               {"missing_ranks", h.missing_ranks},
               {"channel_mismatches", h.channel_mismatches}};
  j.arrays["ranks"] = {h.ranks.size(), [&h](size_t i) { return rank_fate_json(h.ranks[i]); }};
  return j;
}

// Which steps the numbers cover: every steady step, or each model rank's last SteadyWindow::max_steps
// (run_analysis.h, LONG RUNS), with the whole run's pooled totals beside them.
json analysis_window_json(const TrainAnalysis& a) {
  const WholeRun& w = a.whole_run;
  json stages = json::object();
  for (Stage stage : model_step_stages) stages[stage_name(stage)] = w.fraction(stage);
  return {{"max_steps", a.steady.max_steps},
          {"capped", a.steady.capped},
          {"first_step", a.steady.first_step},
          {"last_step", a.steady.last_step},
          {"left_out_steps", a.steady.left_out_steps},
          {"recorded_first_step", a.steady.recorded_first_step},
          {"recorded_last_step", a.steady.recorded_last_step},
          {"whole_run",
           {{"steady_steps", w.steady_steps},
            {"step_seconds_mean", w.step_seconds_mean()},
            {"input_wait_fraction", w.fraction(Stage::batch_wait)},
            {"allreduce_exposed_fraction", w.fraction(Stage::allreduce_exposed)},
            {"stage_fractions", stages}}},
          {"full_data", "timeline/rank-N.json (every span of every rank)"}};
}

using Align = DocumentTable::Align;

// `n` right-aligned columns after a left-aligned first one: report.md's tables of numbers.
std::vector<Align> numbers_after(size_t left_columns, size_t n) {
  std::vector<Align> align(left_columns, Align::left);
  align.insert(align.end(), n, Align::right);
  return align;
}

void verdict_section(ReportDocument& doc, const std::vector<StallVerdict>& verdicts) {
  doc.heading("Verdict");
  if (verdicts.empty()) doc.paragraph("No rule fired: neither input-, compute- nor communication-bound beyond the thresholds.");
  std::vector<DocumentListItem> items;
  for (size_t i = 0; i < std::min(verdicts.size(), verdicts_shown); ++i) {
    const StallVerdict& v = verdicts[i];
    const std::string severity(to_string(v.severity));
    items.push_back({"**" + v.title() + (severity.empty() ? "" : " " + severity) + "**: " + v.summary,
                     {"what to do: " + v.recommendation}});
  }
  const std::string more = more_verdicts_text(verdicts);
  if (!more.empty()) items.push_back({more, {}});
  doc.list(std::move(items));
}

// A table cell read as a number: "12.3%", "4.50", "7", "1.2 MB/s"; nullopt for "-", names, lists.
struct CellNumber {
  double value = 0;
  int decimals = 0;
  std::string suffix;
};

std::optional<CellNumber> cell_number(const std::string& cell) {
  if (cell.empty() || !(std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-')) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(cell.c_str(), &end);
  if (end == cell.c_str() || !std::isfinite(value)) return std::nullopt;
  const std::string number(cell.c_str(), static_cast<size_t>(end - cell.c_str()));
  const std::string suffix(end);
  if (!suffix.empty() && suffix != "%" && suffix[0] != ' ') return std::nullopt;  // "1,2": a list
  const size_t dot = number.find('.');
  return CellNumber{value, dot == std::string::npos ? 0 : static_cast<int>(number.size() - dot - 1), suffix};
}

// The q-quantile (nearest rank) of sorted values.
double nearest_rank(const std::vector<double>& sorted, double q) {
  const auto n = static_cast<double>(sorted.size());
  const auto i = static_cast<size_t>(std::max(1.0, std::ceil(q * n)) - 1);
  return sorted[std::min(i, sorted.size() - 1)];
}

// Whether each rank got the CPU (the timeline's resources; cpu_analysis.h), and what it fetched
// from block devices in the window (page-cache misses: the cache's storage on a data rank).
void cpu_section(ReportDocument& doc, const std::vector<RankCpu>& ranks) {
  if (std::none_of(ranks.begin(), ranks.end(), [](const RankCpu& c) { return c.measured; })) return;
  doc.heading("CPU and storage (what the OS says; ran = share of the window in which the process was not stopped or "
              "starved; storage read = bytes fetched from block devices in the window, and the cores the process used "
              "meanwhile)");
  DocumentTable table{{"rank", "ran", "stalls", "longest stall s", "cores used", "CPU quota", "throttled s",
                       "major faults", "involuntary switches", "storage read", "cores while reading"},
                      numbers_after(1, 10), {}, {}};
  for (const auto& c : ranks) {
    if (!c.measured) continue;
    table.rows.push_back({c.name + (c.descheduled ? " **descheduled**" : ""), percent(c.ran_fraction),
                          std::to_string(c.stalls), fmt::format("{:.3f}", c.longest_stall_seconds),
                          fmt::format("{:.2f}", c.cpu_cores_mean),
                          c.quota_cores ? fmt::format("{:.2f}", *c.quota_cores) : "-",
                          fmt::format("{:.1f}", c.throttled_seconds), std::to_string(c.major_faults),
                          std::to_string(c.involuntary_switches), storage_read_text(c),
                          c.storage_read_seconds > 0 ? fmt::format("{:.2f}", c.storage_cpu_cores()) : "-"});
  }
  rank_table(doc, std::move(table), 1, Worst::lowest, "ranks");
}

// The planned batches' padding per bucket (RUN_DIR/padding.json).
void padding_section(ReportDocument& doc, const json& padding) {
  if (!padding.is_object() || !padding.contains("total")) return;
  doc.heading("Padding (one epoch's planned batches; real / padded)");
  DocumentTable table{{"bucket", "frames", "padded to", "batch", "batches", "real/padded frames", "real/padded tokens"},
                      numbers_after(0, 7), {}, {}};
  for (const auto& b : padding.value("buckets", json::array())) {
    table.rows.push_back({b.value("tail", false) ? std::string("tail") : std::to_string(b.value("bucket", 0)),
                          fmt::format("{}-{}", b.value("shortest_frames", 0), b.value("max_frames", 0)),
                          std::to_string(b.value("max_frames", 0)), std::to_string(b.value("batch_size", 0)),
                          std::to_string(b.value("batches", 0)), percent(b.value("frame_efficiency", 1.0)),
                          percent(b.value("token_efficiency", 1.0))});
  }
  const json& t = padding["total"];
  table.total_row = {"**all**", "", "", "", std::to_string(t.value("batches", 0)),
                     percent(t.value("frame_efficiency", 1.0)), percent(t.value("token_efficiency", 1.0))};
  doc.table(std::move(table));
  // train.mixture: what each cache makes of the epoch (padding_summary.h, "corpora").
  const json corpora = padding.value("corpora", json::array());
  if (!corpora.empty()) {
    doc.heading("Corpora (train.mixture; epoch 0's planned batches)", 3);
    DocumentTable shares{{"corpus", "cache", "weight", "samples", "share of samples", "share of padding",
                          "share of input time", "real/padded frames"},
                         numbers_after(2, 8), {}, {}};
    for (const auto& c : corpora) {
      shares.rows.push_back({std::to_string(c.value("corpus", 0)), markdown_literal(c.value("dir", std::string())),
                             fmt::format("{:g}", c.value("weight", 1.0)), std::to_string(c.value("samples", int64_t{0})),
                             percent(c.value("sample_share", 0.0)), percent(c.value("padding_share", 0.0)),
                             percent(c.value("frame_share", 0.0)), percent(c.value("frame_efficiency", 1.0))});
    }
    doc.table(std::move(shares));
  }
  // train.mixture_temperature_over language or speaker: what the temperature gives each unit
  // (padding_summary.h, "mixture_units": the most sampled, bounded).
  const json units = padding.value("mixture_units", json());
  if (units.is_object()) {
    const std::string over = units.value("over", std::string("unit"));
    doc.heading(fmt::format("{}s (train.mixture_temperature {:g} over each {}; an epoch's samples)",
                            over == "language" ? "Language" : "Speaker", units.value("temperature", 1.0), over),
                3);
    DocumentTable shares_table{{over, "training samples", "samples per epoch", "times per epoch"}, numbers_after(0, 4), {}, {}};
    const auto row = [&](const std::string& name, int64_t samples, double per_epoch) {
      shares_table.rows.push_back({name, std::to_string(samples), fmt::format("{:.0f}", per_epoch),
                            samples > 0 ? fmt::format("{:.2f}", per_epoch / static_cast<double>(samples)) : "-"});
    };
    for (const auto& unit : units.value("units", json::array())) {
      row(markdown_literal(unit.value("name", std::string())), unit.value("samples", int64_t{0}), unit.value("per_epoch", 0.0));
    }
    if (units.contains("others")) {
      const json& others = units["others"];
      row(fmt::format("{} more", others.value("units", int64_t{0})), others.value("samples", int64_t{0}),
          others.value("per_epoch", 0.0));
    }
    doc.table(std::move(shares_table));
  }
  // No sample is left out (batch_plan.h, "Remainder"): say where the remainder went.
  const json remainder = padding.value("remainder", json::object());
  if (remainder.contains("spilled")) {
    std::string text = fmt::format("Remainder: {} samples of epoch 0 spilled into a longer bucket, {} deferred to the "
                                   "next epoch (trained first there).",
                                   remainder.value("spilled", int64_t{0}), remainder.value("deferred", int64_t{0}));
    if (remainder.contains("deferred_past_end")) {
      text += fmt::format(" {} samples deferred past the run's end (the last epoch's remainder).",
                          remainder.value("deferred_past_end", int64_t{0}));
    }
    doc.paragraph(std::move(text));
  }
}

// The validation passes (RUN_DIR/ranks/rank-N.json), with a column per cache of a mixture.
void validation_section(ReportDocument& doc, const json& validation, const json& padding) {
  if (!validation.is_object()) return;
  const json passes = validation.value("passes", json::array());
  if (passes.empty()) return;
  const json corpora = padding.is_object() ? padding.value("corpora", json::array()) : json::array();
  size_t per_corpus = 0;
  std::set<std::string> language_set;
  for (const auto& pass : passes) {
    per_corpus = std::max(per_corpus, pass.value("corpora", json::array()).size());
    const json by_language = pass.value("languages", json::object());
    for (const auto& [code, loss] : by_language.items()) language_set.insert(code);
  }
  // A column per language, the first kMaxLanguageColumns codes (report.json has every one).
  constexpr size_t kMaxLanguageColumns = 8;
  std::vector<std::string> languages(language_set.begin(), language_set.end());
  const size_t languages_left_out = languages.size() > kMaxLanguageColumns ? languages.size() - kMaxLanguageColumns : 0;
  languages.resize(languages.size() - languages_left_out);
  doc.heading("Validation loss");
  DocumentTable table{{"global step", "loss"}, numbers_after(0, 2 + per_corpus + languages.size()), {}, {}};
  for (size_t c = 0; c < per_corpus; ++c) {
    const std::string name = c < corpora.size() ? corpora[c].value("dir", std::string()) : std::string();
    table.header.push_back("corpus " + std::to_string(c) + (name.empty() ? "" : " " + markdown_literal(name)));
  }
  for (const std::string& code : languages) table.header.push_back("language " + markdown_literal(code));
  const auto loss_text = [](const json& value) {
    return value.is_number() ? fmt::format("{:.4f}", value.get<double>()) : std::string("-");
  };
  // A long run validates often: the first pass and the last ten (report.json has every one).
  constexpr size_t kLastPasses = 10;
  for (size_t i = 0; i < passes.size(); ++i) {
    if (i > 0 && i + kLastPasses < passes.size()) continue;
    const json& pass = passes[i];
    std::vector<std::string> row = {std::to_string(pass.value("global_step", int64_t{0})),
                                    loss_text(pass.value("loss", json()))};
    const json losses = pass.value("corpora", json::array());
    for (size_t c = 0; c < per_corpus; ++c) row.push_back(c < losses.size() ? loss_text(losses[c]) : "-");
    const json by_language = pass.value("languages", json::object());
    for (const std::string& code : languages) row.push_back(loss_text(by_language.value(code, json())));
    table.rows.push_back(std::move(row));
  }
  doc.table(std::move(table));
  doc.paragraph(fmt::format("{}Model rank {}'s record (RUN_DIR/ranks/rank-{}.json; every model rank all-reduces the "
                            "same loss){}.",
                            passes.size() > kLastPasses + 1
                                ? fmt::format("{} passes: the first and the last {} (report.json has all). ",
                                              passes.size(), kLastPasses)
                                : std::string(),
                            validation.value("rank", 0), validation.value("rank", 0),
                            std::string(per_corpus > 0 ? "; a corpus column is that cache's validation samples alone" : "") +
                                (languages.empty() ? "" : "; a language column is that language's samples of every cache") +
                                (languages_left_out > 0 ? fmt::format(" ({} more languages in report.json)", languages_left_out)
                                                        : std::string())));
}

// The progress deadlines per role (runtime.timeouts; runtime/train/progress_watchdog.h), from
// each rank's summary: one entry a role, whatever the ranks (the largest deadline and p99 of the
// role's ranks, the fewest steps measured); null for a run whose timelines have none.
json progress_deadlines_json(const TrainAnalysis& a) {
  std::map<std::string, json> roles;
  for (const auto& t : a.timelines) {
    // A rank that failed may have written no summary (null), or an older build's without deadlines.
    if (!t.summary.is_object()) continue;
    const json p = t.summary.value("progress_deadline", json());
    if (!p.is_object()) continue;
    const json step = p.value("step", json::object());
    if (!step.is_object()) continue;
    json& role = roles[t.role];
    const std::string mode = p.value("mode", "fixed");
    if (role.is_null()) {
      role = {{"role", t.role}, {"ranks", 0}, {"mode", mode}};
      if (mode == "measured") {
        role["warmup_steps"] = step.value("warmup", int64_t{0});
        role["percentile"] = "p99 of the last 100";
        role["factor"] = step.value("factor", 0.0);
        role["min_s"] = step.value("min_s", 0.0);
        role["startup_s"] = step.value("startup_s", 0.0);
        role["steps_measured"] = step.value("measured", int64_t{0});
        for (const char* kind : {"step", "checkpoint", "validation"}) {
          role[std::string(kind) + "_p99_s"] = nullptr;  // null: none of the role's ranks measured one
          role[std::string(kind) + "_deadline_s"] = nullptr;
        }
      } else {
        // The heartbeat's silence is the only deadline (common/heartbeat.h, LIVENESS).
        role["deadline_s"] = a.settings.value("runtime.timeout_s", json(nullptr));
      }
    }
    role["ranks"] = role["ranks"].get<int>() + 1;
    if (mode != "measured" || role["mode"] != "measured") continue;
    role["steps_measured"] = std::min(role["steps_measured"].get<int64_t>(), step.value("measured", int64_t{0}));
    for (const char* kind : {"step", "checkpoint", "validation"}) {
      // A rank that measured none (a model rank that writes no checkpoint, a data rank's
      // validation) says nothing of the role's deadline.
      const json d = p.value(kind, json::object());
      if (!d.is_object() || d.value("measured", int64_t{0}) == 0) continue;
      for (const char* number : {"p99_s", "deadline_s"}) {
        json& most = role[std::string(kind) + "_" + number];
        most = most.is_null() ? d.value(number, 0.0) : std::max(most.get<double>(), d.value(number, 0.0));
      }
    }
  }
  if (roles.empty()) return nullptr;
  json out = json::array();
  for (auto& [name, role] : roles) out.push_back(std::move(role));
  return out;
}

void progress_deadlines_table(ReportDocument& doc, const json& deadlines) {
  if (!deadlines.is_array()) return;
  doc.heading("Progress deadlines (runtime.timeouts)");
  DocumentTable table{{"role", "ranks", "mode", "warm-up steps", "p99 step (s)", "factor", "step deadline (s)",
                       "checkpoint deadline (s)"},
                      numbers_after(3, 5), {}, {}};
  const auto seconds = [](const json& role, const std::string& key) {
    const auto it = role.find(key);
    return it != role.end() && it->is_number() ? fmt::format("{:.3g}", it->get<double>()) : std::string("-");
  };
  for (const auto& role : deadlines) {
    if (role.value("mode", "") != "measured") {
      table.rows.push_back({role.value("role", ""), std::to_string(role.value("ranks", 0)), role.value("mode", ""), "-",
                            "-", "-", "-", "-"});
      continue;
    }
    table.rows.push_back({role.value("role", ""), std::to_string(role.value("ranks", 0)), "measured",
                          std::to_string(role.value("warmup_steps", int64_t{0})), seconds(role, "step_p99_s"),
                          fmt::format("{:g}", role.value("factor", 0.0)), seconds(role, "step_deadline_s"),
                          seconds(role, "checkpoint_deadline_s")});
  }
  doc.table(std::move(table));
  doc.paragraph("A measured deadline is runtime.timeout_factor x the p99 of a rank's last 100 steps (its own work, "
                "without its waits on other ranks), at least runtime.timeout_min_s; runtime.startup_timeout_s until "
                "the warm-up steps are done (a checkpoint: until one is measured). The largest of the role's ranks at "
                "the end of the run; -: none of them measured one. fixed: only the heartbeat's runtime.timeout_s (a silent rank) applies; "
                "unwatched: a Python model rank, whose script reports no progress.");
}

// `feed`: whether the ranks exchanged batches (a train run), whose causality was checked.
void clock_section(ReportDocument& doc, const ClockSummary& c, bool feed = true) {
  doc.heading("Clock");
  std::string text = fmt::format("Spans are on rank 0's clock; the largest alignment uncertainty is ±{:.1f} us (rank {}).",
                                 static_cast<double>(c.max_uncertainty_ns) / 1000, c.worst_rank);
  if (feed) {
    text += fmt::format("\nCausality: {} batch receives matched to their sends, {} received before they were sent "
                        "after alignment ({} on the ranks' own clocks){}.",
                        c.causality.pairs_checked, c.causality.violations, c.causality.violations_unaligned,
                        c.causality.example.empty() ? "" : "; e.g. " + c.causality.example +
                            ": the alignment is off by more than its uncertainty, rerun with more runtime.clock_pings");
  }
  doc.paragraph(std::move(text));
}

void fate_section(ReportDocument& doc, const HangFacts& h) {
  if (!h.any) return;
  doc.heading("Ranks at the end");
  DocumentTable table{{"rank", "status", "waiting for", "last step", "error"}, {}, {}, {}};
  // AT SCALE (report_documents.h): above full_table_ranks ranks, the ranks that did not finish,
  // the culprit first, up to worst_ranks_shown, and a count per status.
  const bool bounded = h.ranks.size() > full_table_ranks;
  std::vector<const RankFate*> shown;
  std::map<std::string, size_t> statuses;
  for (const auto& f : h.ranks) {
    ++statuses[f.status];
    if (!bounded || f.status != "finished") shown.push_back(&f);
  }
  if (bounded) {
    std::stable_partition(shown.begin(), shown.end(), [&](const RankFate* f) { return f->rank == h.culprit; });
    std::string counts;
    for (const auto& [status, count] : statuses) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", count, status);
    doc.paragraph(fmt::format("{} ranks: {}. Below, the culprit and the first {} ranks that did not finish (every rank "
                              "is in report.json's hang.ranks).",
                              h.ranks.size(), counts, worst_ranks_shown));
    if (shown.size() > worst_ranks_shown) shown.resize(worst_ranks_shown);
  }
  for (const RankFate* f : shown) {
    table.rows.push_back({f->name, f->status, f->waiting_for >= 0 ? std::to_string(f->waiting_for) : "-",
                          std::to_string(f->last_step), f->error});
  }
  doc.table(std::move(table));
  std::vector<DocumentListItem> channels;
  const size_t listed = h.channel_mismatches.size() > full_table_ranks ? worst_ranks_shown : h.channel_mismatches.size();
  for (size_t i = 0; i < listed; ++i) channels.push_back({"channel: " + h.channel_mismatches[i], {}});
  if (listed < h.channel_mismatches.size()) {
    channels.push_back({fmt::format("and {} more channel mismatches (report.json's hang.channel_mismatches)",
                                    h.channel_mismatches.size() - listed),
                        {}});
  }
  doc.list(std::move(channels));
}

// The steady window and the notes on what the numbers leave out.
void steady_state_paragraphs(ReportDocument& doc, const TrainAnalysis& a) {
  doc.paragraph(fmt::format("Steady state: steps {}–{}, {} per model rank after dropping {} warm-up steps ({:.1f} s). "
                            "Model ranks waited for input {} of their step time, exposed all-reduce {}, exposed "
                            "transfer {}.",
                            a.steady.first_step, a.steady.last_step, a.steady.steady_steps, a.steady.warmup_steps,
                            a.steady.seconds(), percent(a.input_wait_fraction), percent(a.allreduce_exposed_fraction),
                            percent(a.transfer_exposed_fraction)));
  if (a.steady.capped) doc.paragraph(capped_window_text(a));
  if (!a.ignored_timelines.empty()) {
    // Bounded: a run directory that held a 4,096-rank run's files lists 10 and a count.
    std::string note = fmt::format("Note: {} timeline file(s) in timeline/ were left out as not this run's: ",
                                   a.ignored_timelines.size());
    for (size_t i = 0; i < std::min<size_t>(a.ignored_timelines.size(), 10); ++i) {
      note += (i > 0 ? "; " : "") + a.ignored_timelines[i];
    }
    if (a.ignored_timelines.size() > 10) note += fmt::format("; and {} more", a.ignored_timelines.size() - 10);
    doc.paragraph(note + " (report.json's ignored_timelines).");
  }
  if (a.dropped_spans > 0) {
    doc.paragraph(fmt::format("Note: {} spans were dropped from full rings (raise runtime.timing_capacity); the "
                              "earliest steps may be missing.",
                              a.dropped_spans));
  }
}

}  // namespace

void progress_deadlines_section(ReportDocument& doc, const TrainAnalysis& a) {
  progress_deadlines_table(doc, progress_deadlines_json(a));
}

void host_section(ReportDocument& doc, const TrainAnalysis& a) {
  struct Host {
    size_t ranks = 0;
    double busy_p50 = 0, input_wait = 0, allreduce_exposed = 0;
  };
  std::map<std::string, Host> hosts;
  for (const auto& m : a.model_ranks) {
    Host& h = hosts[m.host];
    ++h.ranks;
    h.busy_p50 = std::max(h.busy_p50, m.busy_seconds.p50);
    h.input_wait += m.input_wait_fraction;
    h.allreduce_exposed += m.allreduce_exposed_fraction;
  }
  doc.heading("Hosts (their model ranks; ms)");
  DocumentTable table{{"host", "model ranks", "slowest busy p50", "input wait", "exposed all-reduce"}, numbers_after(1, 4),
                      {}, {}};
  for (const auto& [host, h] : hosts) {
    const auto n = static_cast<double>(h.ranks);
    table.rows.push_back({host, std::to_string(h.ranks), milliseconds(h.busy_p50), percent(h.input_wait / n),
                          percent(h.allreduce_exposed / n)});
  }
  rank_table(doc, std::move(table), 4, Worst::highest, "hosts");
}

namespace {

// The model role pooled, then each model rank (the GPU busy column only where some model rank
// timed its GPU work).
void model_sections(ReportDocument& doc, const TrainAnalysis& a) {
  doc.heading("Model role (steady steps, every model rank pooled; ms per step)");
  DocumentTable role{{"stage", "p50", "p95", "p99", "share of step time"}, numbers_after(1, 4), {}, {}};
  role.rows.push_back({"**step**", milliseconds(a.role_step_seconds.p50), milliseconds(a.role_step_seconds.p95),
                       milliseconds(a.role_step_seconds.p99), "100%"});
  for (const auto& [stage, b] : a.role_stages) {
    role.rows.push_back({stage_name(stage), milliseconds(b.per_step.p50), milliseconds(b.per_step.p95),
                         milliseconds(b.per_step.p99), percent(b.fraction)});
  }
  doc.table(std::move(role));
  doc.heading("Model ranks (steady steps; ms)");
  const bool gpu = a.gpu_busy_fraction.has_value();
  DocumentTable ranks{{"rank", "steps", "step p50", "p95", "p99", "busy p50", "batch_wait p50", "allreduce_exposed p50",
                       "input wait", "exposed all-reduce"},
                      numbers_after(1, gpu ? 10 : 9), {}, {}};
  if (gpu) ranks.header.push_back("GPU busy");
  for (const auto& m : a.model_ranks) {
    ranks.rows.push_back({m.name, std::to_string(m.steady_steps), milliseconds(m.step_seconds.p50),
                          milliseconds(m.step_seconds.p95), milliseconds(m.step_seconds.p99),
                          milliseconds(m.busy_seconds.p50), milliseconds(m.stages.at(Stage::batch_wait).per_step.p50),
                          milliseconds(m.stages.at(Stage::allreduce_exposed).per_step.p50),
                          percent(m.input_wait_fraction), percent(m.allreduce_exposed_fraction)});
    if (gpu) ranks.rows.back().push_back(m.gpu_busy_fraction ? percent(*m.gpu_busy_fraction) : "-");
  }
  rank_table(doc, std::move(ranks), 5, Worst::highest, "model ranks");
  if (a.model_ranks.size() > full_table_ranks) host_section(doc, a);
}

void data_rank_section(ReportDocument& doc, const TrainAnalysis& a) {
  if (a.data_ranks.empty()) return;
  doc.heading("Data ranks (share of the steady window; reader stages per reader thread)");
  DocumentTable table{{"rank", "feeds", "readers", "cache_read", "collate", "wait_for_reader", "credit_wait", "send",
                       "batches", "send bandwidth", "queue depth", "credits", "from storage"},
                      numbers_after(2, 11), {}, {}};
  for (const auto& d : a.data_ranks) {
    std::string feeds;
    for (int r : d.feeds) feeds += (feeds.empty() ? "" : ",") + std::to_string(r);
    table.rows.push_back({d.name, feeds, std::to_string(d.reader_lanes), percent(d.stage_fraction.at(Stage::cache_read)),
                          percent(d.stage_fraction.at(Stage::collate)),
                          percent(d.stage_fraction.at(Stage::wait_for_reader)),
                          percent(d.stage_fraction.at(Stage::credit_wait)), percent(d.stage_fraction.at(Stage::send)),
                          std::to_string(d.batches_sent), fmt::format("{:.1f} MB/s", d.send_bandwidth / 1e6),
                          d.queue_depth_mean ? fmt::format("{:.2f}", *d.queue_depth_mean) : "-",
                          d.credits_mean ? fmt::format("{:.2f}", *d.credits_mean) : "-", from_storage_text(a, d)});
  }
  rank_table(doc, std::move(table), 3, Worst::highest, "data ranks");
  doc.paragraph("from storage: the bytes the data rank fetched from block devices in the steady window (page-cache "
                "misses), their share of the bytes it sent, and, from a 10% share, the rate over its readers' "
                "cache_read time (docs/report.md, \"Slow cache storage\").");
}

void prep_rank_section(ReportDocument& doc, const PrepAnalysis& a) {
  doc.heading("Prep ranks");
  DocumentTable table{{"rank", "rows", "seconds", "rows/s", "audio s/s", "row p50 ms", "p95", "p99", "decode s",
                       "resample s", "features s", "write s", "rejects"},
                      numbers_after(1, 12), {}, {}};
  for (const auto& r : a.ranks) {
    const auto stage = [&](Stage s) { return fmt::format("{:.2f}", r.stage_seconds.count(s) ? r.stage_seconds.at(s) : 0.0); };
    table.rows.push_back({r.name, std::to_string(r.rows), fmt::format("{:.2f}", r.window_seconds),
                          fmt::format("{:.1f}", r.rows_per_second),
                          r.audio_seconds_per_second >= 0 ? fmt::format("{:.1f}", r.audio_seconds_per_second) : "-",
                          milliseconds(r.row_seconds.p50), milliseconds(r.row_seconds.p95),
                          milliseconds(r.row_seconds.p99), stage(Stage::decode), stage(Stage::resample),
                          stage(Stage::features), stage(Stage::write),
                          r.rejects >= 0 ? std::to_string(r.rejects) : "-"});
  }
  rank_table(doc, std::move(table), 3, Worst::lowest, "prep ranks");
}

void reject_section(ReportDocument& doc, const PrepAnalysis& a) {
  doc.heading("Rejects");
  if (a.prep_report.is_null()) {
    doc.paragraph("No prep-report.json in the cache directory: the job did not reach its end on rank 0.");
  } else if (a.reject_reasons.empty()) {
    doc.paragraph(fmt::format("None of the {} corpus rows was rejected.", a.corpus_rows));
  } else {
    doc.paragraph(fmt::format("{} of {} corpus rows rejected (details in rejects.jsonl):", a.rejects, a.corpus_rows));
    DocumentTable table{{"reason", "rows"}, numbers_after(1, 1), {}, {}};
    for (const auto& [reason, count] : a.reject_reasons) table.rows.push_back({reason, std::to_string(count)});
    doc.table(std::move(table));
  }
}

json model_rank_json(const ModelRankAnalysis& m) {
  json series = json::array();
  for (const auto& s : m.steps) series.push_back({s.step, s.seconds, s.steady});
  return {{"rank", m.rank},
          {"name", m.name},
          {"host", m.host},
          {"gpu", m.gpu},
          {"fed_by", m.fed_by},
          {"steps", m.recorded_steps},
          {"warmup_steps", m.warmup_steps},
          {"steady_steps", m.steady_steps},
          {"step_seconds", m.step_seconds.to_json()},
          {"busy_seconds", m.busy_seconds.to_json()},
          {"stages", stages_json(m.stages)},
          {"input_wait_fraction", m.input_wait_fraction},
          {"allreduce_exposed_fraction", m.allreduce_exposed_fraction},
          {"transfer_exposed_fraction", m.transfer_exposed_fraction},
          {"gpu_busy_fraction", m.gpu_busy_fraction ? json(*m.gpu_busy_fraction) : json(nullptr)},
          {"allreduce_bytes", m.allreduce_bytes},
          {"step_series", series}};
}

json data_rank_json(const DataRankAnalysis& d) {
  json stages = json::object();
  for (Stage stage : data_stages) {
    stages[stage_name(stage)] = {{"seconds", d.stage_seconds.count(stage) ? d.stage_seconds.at(stage) : 0.0},
                                  {"fraction", d.stage_fraction.at(stage)}};
  }
  return {{"rank", d.rank},
          {"name", d.name},
          {"host", d.host},
          {"gpu", d.gpu},
          {"feeds", d.feeds},
          {"window_seconds", d.window_seconds},
          {"reader_lanes", d.reader_lanes},
          {"stages", stages},
          {"batches_sent", d.batches_sent},
          {"bytes_sent", d.bytes_sent},
          {"send_bandwidth_bytes_per_s", d.send_bandwidth},
          {"send_exposed_fraction", d.send_exposed_fraction},
          {"waiting_on_model_fraction", d.waiting_on_model_fraction},
          {"queue_depth_mean", d.queue_depth_mean ? json(*d.queue_depth_mean) : json(nullptr)},
          {"credits_mean", d.credits_mean ? json(*d.credits_mean) : json(nullptr)},
          {"busiest_stage", stage_name(d.busiest_stage)},
          {"busiest_fraction", d.busiest_fraction}};
}

}  // namespace

std::string from_storage_text(const TrainAnalysis& a, const DataRankAnalysis& d) {
  const RankCpu* cpu = a.cpu_of(d.rank);
  if (!cpu || !cpu->storage_measured) return "-";
  const auto bytes = static_cast<double>(cpu->storage_read_bytes);
  const double share = d.bytes_sent > 0 ? bytes / static_cast<double>(d.bytes_sent) : 0;
  std::string text = fmt::format("{} ({} of sent)", bytes_text(bytes), percent(share));
  // A rate only where the storage carried a real part of the feed: a few kB of page-cache misses
  // over a few ms of cache_read would read as a slow device.
  if (share >= storage_read_min_share) text += " at " + bandwidth_text(storage_bytes_per_second(d, *cpu));
  return text;
}

std::string capped_window_text(const TrainAnalysis& a) {
  const WholeRun& w = a.whole_run;
  return fmt::format("Long run: the numbers and verdicts cover each model rank's last {} steady steps (steps {}–{}); "
                     "up to {} earlier steady steps per rank are left out of them, to keep the report's memory "
                     "bounded (the cyclic-stall rule still reads every step). Over all the steady steps recorded "
                     "(steps {}–{}): mean step {} ms, input wait {}, exposed all-reduce {}. Every span is in "
                     "timeline/rank-N.json.",
                     a.steady.max_steps, a.steady.first_step, a.steady.last_step, a.steady.left_out_steps,
                     a.steady.recorded_first_step, a.steady.recorded_last_step, milliseconds(w.step_seconds_mean()),
                     percent(w.fraction(Stage::batch_wait)), percent(w.fraction(Stage::allreduce_exposed)));
}

std::string gpu_busy_text(const TrainAnalysis& a) {
  if (!a.gpu_busy_fraction) return "";
  std::string text = fmt::format("GPU busy {} of the model ranks' steady step time (CUDA events around each step's "
                                 "GPU work)",
                                 percent(*a.gpu_busy_fraction));
  const auto timed = std::count_if(a.model_ranks.begin(), a.model_ranks.end(),
                                   [](const ModelRankAnalysis& m) { return m.gpu_busy_fraction.has_value(); });
  if (timed > 1) {
    const auto lowest = std::find_if(a.model_ranks.begin(), a.model_ranks.end(),
                                     [&](const ModelRankAnalysis& m) { return m.rank == a.gpu_busy_lowest_rank; });
    text += fmt::format("; least busy: {} at {}", lowest->name, percent(a.gpu_busy_lowest_fraction));
  }
  return text + ".";
}

std::string verdict_lines(const std::vector<StallVerdict>& verdicts) {
  std::string text;
  for (size_t i = 0; i < std::min(verdicts.size(), verdicts_shown); ++i) {
    text += verdicts[i].headline() + "\n  -> " + verdicts[i].recommendation + "\n";
  }
  const std::string more = more_verdicts_text(verdicts);
  return more.empty() ? text : text + more + "\n";
}

std::string more_verdicts_text(const std::vector<StallVerdict>& verdicts) {
  if (verdicts.size() <= verdicts_shown) return "";
  // Per kind, in the order the verdicts come (most severe first): how many and the ranks named.
  std::vector<std::pair<std::string, std::vector<int>>> kinds;
  std::vector<size_t> counts;
  for (size_t i = verdicts_shown; i < verdicts.size(); ++i) {
    const std::string title = verdicts[i].title();
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == title; });
    if (it == kinds.end()) {
      kinds.push_back({title, {}});
      counts.push_back(0);
      it = kinds.end() - 1;
    }
    ++counts[static_cast<size_t>(it - kinds.begin())];
    if (verdicts[i].rank >= 0) it->second.push_back(verdicts[i].rank);
  }
  std::string text = fmt::format("and {} more verdicts (every one in report.json): ", verdicts.size() - verdicts_shown);
  for (size_t k = 0; k < kinds.size(); ++k) {
    text += fmt::format("{}{} x{}", k > 0 ? "; " : "", kinds[k].first, counts[k]);
    if (!kinds[k].second.empty()) text += " (ranks " + rank_list(kinds[k].second) + ")";
  }
  return text;
}

void rank_table(ReportDocument& doc, DocumentTable table, size_t key_column, Worst worst, const std::string& what) {
  const size_t n = table.rows.size();
  if (n <= full_table_ranks) {
    doc.table(std::move(table));
    return;
  }
  const size_t columns = table.header.size();
  std::vector<std::string> median_row(columns), p95_row(columns);
  median_row[0] = fmt::format("**median** ({} {})", n, what);
  p95_row[0] = "**p95**";
  for (size_t c = 1; c < columns; ++c) {
    std::vector<double> values;
    std::optional<CellNumber> format;
    bool numeric = true;
    for (const auto& row : table.rows) {
      const auto number = c < row.size() ? cell_number(row[c]) : std::nullopt;
      if (!number || (format && number->suffix != format->suffix)) {
        numeric = false;
        break;
      }
      if (!format || number->decimals > format->decimals) format = number;
      values.push_back(number->value);
    }
    if (!numeric || values.empty()) continue;
    std::sort(values.begin(), values.end());
    const auto text = [&](double value) { return fmt::format("{:.{}f}{}", value, format->decimals, format->suffix); };
    median_row[c] = text(nearest_rank(values, 0.5));
    p95_row[c] = text(nearest_rank(values, 0.95));
  }
  // The worst rows by the key column, worst first (rows whose key is no number last).
  const auto key = [&](const std::vector<std::string>& row) {
    const auto number = key_column < row.size() ? cell_number(row[key_column]) : std::nullopt;
    if (!number) return -HUGE_VAL;
    return worst == Worst::highest ? number->value : -number->value;
  };
  std::vector<std::vector<std::string>> rows = std::move(table.rows);
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return key(a) > key(b); });
  rows.resize(worst_ranks_shown);
  table.rows = {std::move(median_row), std::move(p95_row)};
  for (auto& row : rows) table.rows.push_back(std::move(row));
  doc.paragraph(fmt::format("{} {}: the median and p95 of each column over all of them, then the {} with the {} {} "
                            "(report.json has every rank).",
                            n, what, worst_ranks_shown, worst == Worst::highest ? "highest" : "lowest",
                            table.header[key_column]));
  doc.table(std::move(table));
}

StreamedJson train_report_json(const TrainAnalysis& a, const std::vector<StallVerdict>& verdicts) {
  StreamedJson document;
  json& j = document.members;
  j["format"] = report_format;
  j["job"] = "train";
  j["world_size"] = a.world_size;
  j["verdicts"] = json::array();
  for (const auto& v : verdicts) j["verdicts"].push_back(v.to_json());
  j["steady_state"] = {{"enough", a.steady.enough},       {"steady_steps", a.steady.steady_steps},
                       {"warmup_steps", a.steady.warmup_steps}, {"first_step", a.steady.first_step},
                       {"last_step", a.steady.last_step},  {"window_seconds", a.steady.seconds()},
                       {"required_steps", min_steady_steps}};
  j["analysis_window"] = analysis_window_json(a);
  j["model_role"] = {{"step_seconds", a.role_step_seconds.to_json()},
                     {"stages", stages_json(a.role_stages)},
                     {"input_wait_fraction", a.input_wait_fraction},
                     {"allreduce_exposed_fraction", a.allreduce_exposed_fraction},
                     {"transfer_exposed_fraction", a.transfer_exposed_fraction}};
  j["gpu_busy"] = a.gpu_busy_fraction ? json{{"fraction", *a.gpu_busy_fraction},
                                             {"lowest_rank", a.gpu_busy_lowest_rank},
                                             {"lowest_fraction", a.gpu_busy_lowest_fraction},
                                             {"source", "CUDA events around each model step's GPU work"}}
                                      : json(nullptr);
  // The per-rank lists, an entry at a time as the file is written.
  document.arrays["model_ranks"] = {a.model_ranks.size(), [&a](size_t i) { return model_rank_json(a.model_ranks[i]); }};
  document.arrays["data_ranks"] = {a.data_ranks.size(), [&a](size_t i) { return data_rank_json(a.data_ranks[i]); }};
  document.arrays["cpu"] = {a.cpu.size(), [&a](size_t i) { return a.cpu[i].to_json(); }};
  j["padding"] = a.padding;
  j["validation"] = a.validation;
  j["progress_deadlines"] = progress_deadlines_json(a);
  if (!a.restarts.is_null()) j["restarts"] = a.restarts;  // only a supervised run has one
  j["clock"] = clock_json(a.clock);
  document.objects["hang"] = hang_json(a.hang);
  j["settings"] = a.settings;
  j["injected_delay"] = a.injected_delay;
  j["dropped_spans"] = a.dropped_spans;
  json ignored = json::array();
  for (size_t i = 0; i < std::min<size_t>(a.ignored_timelines.size(), 100); ++i) ignored.push_back(a.ignored_timelines[i]);
  j["ignored_timelines"] = {{"count", a.ignored_timelines.size()}, {"files", ignored}};
  return document;
}

std::string train_report_markdown(const TrainAnalysis& a, const std::vector<StallVerdict>& verdicts,
                                  const std::string& run_dir) {
  ReportDocument doc;
  doc.heading("sluice train report: " + markdown_literal(run_dir), 1);
  if (a.gpu_busy_fraction) doc.strong_paragraph(gpu_busy_text(a));
  verdict_section(doc, verdicts);
  steady_state_paragraphs(doc, a);
  model_sections(doc, a);
  data_rank_section(doc, a);
  cpu_section(doc, a.cpu);
  padding_section(doc, a.padding);
  validation_section(doc, a.validation, a.padding);
  progress_deadlines_section(doc, a);
  restart_section(doc, a.restarts);
  clock_section(doc, a.clock);
  fate_section(doc, a.hang);
  doc.raw("Files: report.json (every number above), report.html (charts), trace.json (open in https://ui.perfetto.dev "
          "or chrome://tracing). Rules and thresholds: docs/report.md.\n");
  return render_markdown(doc);
}

json prep_report_json(const PrepAnalysis& a) {
  json j;
  j["format"] = report_format;
  j["job"] = "prep";
  j["world_size"] = a.world_size;
  j["verdicts"] = json::array();
  for (const auto& v : a.verdicts) j["verdicts"].push_back(v.to_json());
  j["job_seconds"] = a.job_seconds;
  j["rows_per_second"] = a.rows_per_second;
  j["corpus_rows"] = a.corpus_rows;
  j["rejects"] = a.rejects;
  j["reject_reasons"] = a.reject_reasons;
  j["ranks"] = json::array();
  for (const auto& r : a.ranks) {
    json stages = json::object();
    for (Stage stage : prep_stages) stages[stage_name(stage)] = r.stage_seconds.count(stage) ? r.stage_seconds.at(stage) : 0.0;
    j["ranks"].push_back({{"rank", r.rank},
                          {"name", r.name},
                          {"host", r.host},
                          {"status", r.status},
                          {"rows", r.rows},
                          {"window_seconds", r.window_seconds},
                          {"rows_per_second", r.rows_per_second},
                          {"audio_seconds", r.audio_seconds >= 0 ? json(r.audio_seconds) : json(nullptr)},
                          {"audio_seconds_per_second",
                           r.audio_seconds_per_second >= 0 ? json(r.audio_seconds_per_second) : json(nullptr)},
                          {"rejects", r.rejects >= 0 ? json(r.rejects) : json(nullptr)},
                          {"stage_seconds", stages},
                          {"row_seconds", r.row_seconds.to_json()}});
  }
  j["clock"] = clock_json(a.clock);
  j["hang"] = hang_json(a.hang).to_json();
  j["prep_report_found"] = !a.prep_report.is_null();
  return j;
}

std::string prep_report_markdown(const PrepAnalysis& a, const std::string& cache_dir) {
  ReportDocument doc;
  doc.heading("sluice prep report: " + markdown_literal(cache_dir), 1);
  verdict_section(doc, a.verdicts);
  doc.paragraph(fmt::format("{} ranks, {:.1f} s from the first to the last span, {:.1f} rows/s in all.", a.ranks.size(),
                            a.job_seconds, a.rows_per_second));
  prep_rank_section(doc, a);
  reject_section(doc, a);
  clock_section(doc, a.clock, false);
  fate_section(doc, a.hang);
  return render_markdown(doc);
}

}  // namespace sluice::report
