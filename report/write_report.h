#pragma once
// The report's entry points: read the timelines of a run, analyse, write report.md, report.json,
// report.html and trace.json next to them, and return the verdict lines for the caller to print.
// Used by `sluice report DIR` and, at the end of a train run, by rank 0.
#include <filesystem>
#include <string>

#include "report/run_analysis.h"

namespace sluice::report {

// RUN_DIR/timeline/rank-*.json (job "train") -> RUN_DIR/report.{md,json,html}, RUN_DIR/trace.json.
// Throws DataError naming RUN_DIR/timeline when there are no timelines, or a malformed file.
std::string write_train_report(const std::filesystem::path& run_dir);

// CACHE_DIR/timeline/rank-*.json (job "prep") and CACHE_DIR/prep-report.json -> the same four
// files in CACHE_DIR.
std::string write_prep_report(const std::filesystem::path& cache_dir);

// RUN_DIR/timeline/rank-N.json read one file at a time, each only when asked for; only this run's:
// rank-N.json holding rank N of the world size the lowest-numbered file holds (a copy under another
// number, or a file of a run on another number of ranks, is left out; report.md says which).
TimelineSource timelines_on_disk(const std::filesystem::path& run_dir);

// Either of the above, chosen by the timelines' job.
std::string write_report(const std::filesystem::path& dir);

}  // namespace sluice::report
