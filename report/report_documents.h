#pragma once
// report.json and report.md of a train or prep run, from its analysis and verdicts. The JSON
// schema is documented in docs/report.md ("report.json"); change both together.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/prep_analysis.h"
#include "report/report_document.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"
#include "report/streamed_json.h"

namespace sluice::report {

inline constexpr const char* report_format = "sluice-report/1";

// report.json of a train run; its per-rank lists (model_ranks, data_ranks, cpu, hang.ranks) are made
// an entry at a time as it is written, so that 16,384 ranks' entries are never one tree in memory.
// It refers to `analysis` and `verdicts`: write it while they live.
StreamedJson train_report_json(const TrainAnalysis& analysis, const std::vector<StallVerdict>& verdicts);
// Verdicts first (numbers and recommendation), then the per-role and per-rank tables.
std::string train_report_markdown(const TrainAnalysis& analysis, const std::vector<StallVerdict>& verdicts,
                                  const std::string& run_dir);

nlohmann::json prep_report_json(const PrepAnalysis& analysis);
std::string prep_report_markdown(const PrepAnalysis& analysis, const std::string& cache_dir);

// A data rank's "from storage" cell (markdown and HTML tables): the bytes it fetched from block
// devices in the steady window, their share of the bytes it sent and, from storage_read_min_share
// on, the rate over its readers' cache_read time; "-" when not measured.
std::string from_storage_text(const TrainAnalysis& analysis, const DataRankAnalysis& data_rank);

// A capped analysis (run_analysis.h, LONG RUNS): which steps the numbers cover, what was left
// out, and the whole run's totals; one paragraph for report.md and report.html.
std::string capped_window_text(const TrainAnalysis& analysis);

// The headline of a run with GPU model ranks: "GPU busy 97.1% of the model ranks' steady time
// (CUDA events ...; least busy: rank 2 ... at 95.0%)"; empty when no model rank timed its GPU.
std::string gpu_busy_text(const TrainAnalysis& analysis);

// AT SCALE. Up to full_table_ranks ranks, report.md and report.html show a row per rank (and a
// chart line or bar per rank), as they always have; above it, each per-rank table shows the
// distribution (median and p95 of every numeric column) and the worst_ranks_shown ranks by the
// column that matters for it, and says how many it left out. report.json keeps every rank.
inline constexpr size_t full_table_ranks = 32;
inline constexpr size_t worst_ranks_shown = 10;
// The most verdicts written out in full; the rest are counted by kind with their ranks named
// (named_list), so the verdict section of a 4,096-rank run fits a screen.
inline constexpr size_t verdicts_shown = 8;

// Which end of a table's key column is the bad one.
enum class Worst { highest, lowest };

// Adds a per-rank table to `doc`, bounded (AT SCALE): at most full_table_ranks rows, as given;
// otherwise a sentence saying what it shows, then rows "median" and "p95" (every column whose
// cells are all numbers, "12.3%", "4.50", "7", written as its cells are) and the
// worst_ranks_shown rows by `key_column`, worst first. `what`: the rows, "model ranks".
void rank_table(ReportDocument& doc, DocumentTable table, size_t key_column, Worst worst, const std::string& what);

// AT SCALE: the model ranks per host (what a host's link or its neighbours do shows on all of
// them): the slowest rank's busy p50 and the ranks' mean shares, bounded like a per-rank table
// by the exposed all-reduce (the host whose ranks wait longest on the network). report.md and
// report.html add it above full_table_ranks model ranks.
void host_section(ReportDocument& doc, const TrainAnalysis& a);

// The progress deadlines table (runtime.timeouts; report.json's progress_deadlines): a row per
// role, whatever the ranks; nothing for timelines without them.
void progress_deadlines_section(ReportDocument& doc, const TrainAnalysis& a);

// The restarts table (RUN_DIR/restarts.json): a row per restart (at most 100), its fault, steps
// and lost time; nothing when the run was not restarted (restart_verdict.cpp).
void restart_section(ReportDocument& doc, const nlohmann::json& restarts);

// The verdicts past the first verdicts_shown, in one sentence: "12 more verdicts: straggler
// (ranks 5, 9 and 3 more), ...; every one in report.json". "" when there are none.
std::string more_verdicts_text(const std::vector<StallVerdict>& verdicts);

// The lines a launcher prints: one per verdict, with its recommendation.
std::string verdict_lines(const std::vector<StallVerdict>& verdicts);

}  // namespace sluice::report
