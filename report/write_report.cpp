#include "report/write_report.h"

#include "common/error.h"
#include "common/file_util.h"
#include "report/chrome_trace.h"
#include "report/html_report.h"
#include "report/prep_analysis.h"
#include "report/report_documents.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"
#include "timing/timeline_file.h"

namespace sluice::report {
namespace {

namespace fs = std::filesystem;

std::vector<timing::RankTimeline> timelines_of(const fs::path& dir) {
  auto timelines = timing::read_timelines(dir);
  if (timelines.empty()) {
    throw DataError((dir / "timeline").string() +
                    ": no rank-N.json timelines, so there is nothing to report. Is this a run directory "
                    "(train.run_dir) or a cache directory of `sluice prep`, written with runtime.timing on?");
  }
  return timelines;
}

std::string files_line(const fs::path& dir) {
  return "report: " + (dir / "report.md").string() + " (also report.json, report.html, trace.json)\n";
}

// RUN_DIR/padding.json (written by rank 0 of `sluice train`), null when absent.
nlohmann::json padding_of(const fs::path& run_dir) {
  const fs::path file = run_dir / "padding.json";
  if (!fs::exists(file)) return nullptr;
  try {
    return nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& error) {
    throw DataError(file.string() + ": not valid JSON (" + error.what() + "); delete it, or rerun the train job to "
                    "rewrite it");
  }
}

std::string train_report(const fs::path& run_dir, const std::vector<timing::RankTimeline>& timelines) {
  TrainAnalysis analysis = analyze_train(timelines);
  analysis.padding = padding_of(run_dir);
  const auto verdicts = train_verdicts(analysis);
  write_file_atomically(run_dir / "report.json", train_report_json(analysis, verdicts).dump(2) + "\n");
  write_file_atomically(run_dir / "report.md", train_report_markdown(analysis, verdicts, run_dir.string()));
  write_file_atomically(run_dir / "report.html", train_report_html(analysis, verdicts, run_dir.string()));
  write_file_atomically(run_dir / "trace.json", chrome_trace(analysis.timelines).dump() + "\n");
  return verdict_lines(verdicts) + files_line(run_dir);
}

std::string prep_report(const fs::path& cache_dir, const std::vector<timing::RankTimeline>& timelines) {
  nlohmann::json prep_json;  // null when the job did not finish
  const fs::path prep_file = cache_dir / "prep-report.json";
  if (fs::exists(prep_file)) {
    try {
      prep_json = nlohmann::json::parse(read_file(prep_file));
    } catch (const nlohmann::json::exception& error) {
      throw DataError(prep_file.string() + ": not valid JSON (" + error.what() + "); rerun `sluice prep` to rewrite it");
    }
  }
  const PrepAnalysis analysis = analyze_prep(timelines, prep_json);
  write_file_atomically(cache_dir / "report.json", prep_report_json(analysis).dump(2) + "\n");
  write_file_atomically(cache_dir / "report.md", prep_report_markdown(analysis, cache_dir.string()));
  write_file_atomically(cache_dir / "report.html", prep_report_html(analysis, cache_dir.string()));
  write_file_atomically(cache_dir / "trace.json", chrome_trace(analysis.timelines).dump() + "\n");
  return verdict_lines(analysis.verdicts) + files_line(cache_dir);
}

}  // namespace

std::string write_train_report(const fs::path& run_dir) { return train_report(run_dir, timelines_of(run_dir)); }

std::string write_prep_report(const fs::path& cache_dir) { return prep_report(cache_dir, timelines_of(cache_dir)); }

std::string write_report(const fs::path& dir) {
  const auto timelines = timelines_of(dir);
  return timelines.front().job == "prep" ? prep_report(dir, timelines) : train_report(dir, timelines);
}

}  // namespace sluice::report
