#pragma once
// report.json and report.md of a train or prep run, from its analysis and verdicts. The JSON
// schema is documented in docs/report.md ("report.json"); change both together.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/prep_analysis.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"

namespace sluice::report {

inline constexpr const char* report_format = "sluice-report/1";

nlohmann::json train_report_json(const TrainAnalysis& analysis, const std::vector<StallVerdict>& verdicts);
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

// The lines a launcher prints: one per verdict, with its recommendation.
std::string verdict_lines(const std::vector<StallVerdict>& verdicts);

}  // namespace sluice::report
