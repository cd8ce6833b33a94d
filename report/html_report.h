#pragma once
// report.html: one self-contained file (inline SVG and CSS, a small inline script, nothing
// fetched). Train: step time per model rank over time, stacked stage breakdown per rank, queue
// depth and credits over time, step-time histogram. Prep: rows/s per rank, stage breakdown per
// rank, seconds-per-row histogram. The script sets document.body.dataset.ready = "1" when it ran
// to its end, which the headless-browser test checks.
#include <string>
#include <vector>

#include "report/prep_analysis.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"

namespace sluice::report {

std::string train_report_html(const TrainAnalysis& analysis, const std::vector<StallVerdict>& verdicts,
                              const std::string& run_dir);
std::string prep_report_html(const PrepAnalysis& analysis, const std::string& cache_dir);

}  // namespace sluice::report
