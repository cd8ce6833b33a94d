#include "report/write_report.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include "common/error.h"
#include "common/file_util.h"
#include "report/chrome_trace.h"
#include "report/html_report.h"
#include "report/ranks_csv.h"
#include "report/prep_analysis.h"
#include "report/report_documents.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"
#include "timing/timeline_file.h"

namespace sluice::report {
namespace {

namespace fs = std::filesystem;

DataError no_timelines(const fs::path& dir) {
  return DataError((dir / "timeline").string() +
                   ": no rank-N.json timelines, so there is nothing to report. Is this a run directory "
                   "(train.run_dir) or a cache directory of `sluice prep`, written with runtime.timing on?");
}

std::vector<timing::RankTimeline> timelines_of(const fs::path& dir) {
  auto timelines = timing::read_timelines(dir);
  if (timelines.empty()) throw no_timelines(dir);
  return timelines;
}

std::string files_line(const fs::path& dir, const std::string& also = "report.json, report.html, trace.json") {
  return "report: " + (dir / "report.md").string() + " (also " + also + ")\n";
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

// The validation passes of the lowest rank whose RUN_DIR/ranks/rank-N.json has any (the model
// ranks all-reduce the loss, so every model rank records the same), null when none does: the rank
// files are written at the run's end and may be missing (a failed run) or unreadable here.
nlohmann::json validation_of(const fs::path& run_dir) {
  std::map<int, fs::path> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(run_dir / "ranks", error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    try {
      files[std::stoi(name.substr(5))] = entry.path();
    } catch (const std::exception&) {
    }
  }
  for (const auto& [rank, file] : files) {
    try {
      const nlohmann::json stats = nlohmann::json::parse(read_file(file));
      const nlohmann::json passes = stats.value("validation", nlohmann::json::array());
      if (passes.is_array() && !passes.empty()) return {{"rank", rank}, {"passes", passes}};
    } catch (const std::exception&) {
      // A rank file being written or damaged: the report is about the timelines; skip it.
    }
  }
  return nullptr;
}

// RUN_DIR/restarts.json (written by `sluice supervise`), null when absent. Read while the
// supervisor may rewrite it: it writes atomically, so a reader sees a whole file.
nlohmann::json restarts_of(const fs::path& run_dir) {
  const fs::path file = run_dir / "restarts.json";
  if (!fs::exists(file)) return nullptr;
  try {
    return nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& error) {
    throw DataError(file.string() + ": not valid JSON (" + error.what() + "); delete it (the run's restarts are "
                    "also in the supervisor's log)");
  }
}

// The ranks the verdicts name, for trace.json's selection.
std::vector<int> named_ranks(const std::vector<StallVerdict>& verdicts) {
  std::vector<int> ranks;
  for (const auto& v : verdicts) {
    if (v.rank >= 0) ranks.push_back(v.rank);
    for (const char* key : {"busiest_data_rank", "descheduled_rank", "culprit"}) {
      const auto it = v.numbers.find(key);
      if (it != v.numbers.end() && it->is_number_integer() && it->get<int>() >= 0) ranks.push_back(it->get<int>());
    }
  }
  return ranks;
}

// Timeline files left out as not this run's: file name -> why (a map: the analysis reads twice).
using IgnoredFiles = std::map<std::string, std::string>;

// `ignored` is filled by `source` as the analysis reads it (timelines_on_disk below).
std::string train_report(const fs::path& run_dir, const TimelineSource& source, const IgnoredFiles& ignored) {
  TrainAnalysis analysis = analyze_train(source);
  analysis.padding = padding_of(run_dir);
  analysis.restarts = restarts_of(run_dir);
  analysis.validation = validation_of(run_dir);
  for (const auto& [file, why] : ignored) analysis.ignored_timelines.push_back(file + ": " + why);
  const auto verdicts = train_verdicts(analysis);
  const TraceSelection selection = choose_trace(analysis, named_ranks(verdicts));
  StreamedJson report_json = train_report_json(analysis, verdicts);
  report_json.members["trace_selection"] = selection.to_json();
  AtomicFileWriter json_file(run_dir / "report.json");
  report_json.write(json_file);
  json_file.write("\n");
  json_file.commit();
  write_file_atomically(run_dir / "report.md", train_report_markdown(analysis, verdicts, run_dir.string()) +
                                                   "\n## Trace\n\n" + selection.describe() + "\n");
  write_file_atomically(run_dir / "report.html", train_report_html(analysis, verdicts, run_dir.string()));
  write_file_atomically(run_dir / "ranks.csv", ranks_csv(analysis));
  write_chrome_trace(run_dir / "trace.json", source, selection);
  return verdict_lines(verdicts) + files_line(run_dir, "report.json, report.html, trace.json, ranks.csv");
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
  write_chrome_trace(cache_dir / "trace.json", timelines_in(timelines), whole_trace(analysis.timelines));
  return verdict_lines(analysis.verdicts) + files_line(cache_dir);
}

// How many timelines are read ahead of the analysis, each on its own thread: the cores there are,
// at most 8 (more buys little: the analysis of one timeline takes about as long as reading one).
size_t report_read_threads() {
  return std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 8);
}

// Visits `files` in their order on the calling thread while up to `window` of the next ones are
// read and parsed on their own threads: reading overlaps the analysis, and memory holds at most
// `window` + 1 timelines. A bad file throws when its turn comes, as a one-at-a-time read would
// (the reads already started finish first: a future's destructor waits).
void read_ahead(const std::vector<fs::path>& files,
                const std::function<void(const fs::path&, timing::RankTimeline)>& visit, size_t window) {
  std::deque<std::future<timing::RankTimeline>> ahead;
  size_t next = 0;
  const auto refill = [&] {
    for (; next < files.size() && ahead.size() < window; ++next) {
      ahead.push_back(std::async(std::launch::async, [file = files[next]] { return timing::read_timeline(file); }));
    }
  };
  refill();
  for (size_t done = 0; !ahead.empty(); ++done) {
    timing::RankTimeline timeline = ahead.front().get();
    ahead.pop_front();
    refill();
    visit(files[done], std::move(timeline));
  }
}

// The files of RUN_DIR/timeline/ that are this run's: rank-N.json holding rank N of the world size
// the lowest-numbered file holds. A copy under another number (it would count a rank twice) or a
// file of a run on another number of ranks (a resume on fewer ranks once reported the earlier
// run's model ranks as its own) is left out, and `ignored` says which and why.
TimelineSource timelines_on_disk(const fs::path& run_dir, const std::shared_ptr<IgnoredFiles>& ignored) {
  const std::map<int, fs::path> files = timing::timeline_files(run_dir);
  const int world = files.empty() ? 0 : timing::read_timeline(files.begin()->second).world_size;
  return [files, world, ignored](const std::function<bool(int)>& wanted, const TimelineVisitor& visit) {
    std::vector<fs::path> chosen;
    for (const auto& [rank, file] : files) {
      if (rank >= world) {
        (*ignored)[file.filename().string()] = "no rank " + std::to_string(rank) + " in this " +
                                              std::to_string(world) + "-rank run (an earlier run's file, or a copy)";
      } else if (wanted(rank)) {
        chosen.push_back(file);
      }
    }
    read_ahead(
        chosen,
        [&](const fs::path& file, timing::RankTimeline timeline) {
          const std::string name = file.filename().string();
          if (name != "rank-" + std::to_string(timeline.rank) + ".json") {
            (*ignored)[name] = "holds rank " + std::to_string(timeline.rank) + "'s timeline";
          } else if (timeline.world_size != world) {
            (*ignored)[name] = "from a run on " + std::to_string(timeline.world_size) + " ranks; this run has " +
                               std::to_string(world);
          } else {
            visit(std::move(timeline));
          }
        },
        report_read_threads());
  };
}

std::string train_report_on_disk(const fs::path& run_dir) {
  const auto ignored = std::make_shared<IgnoredFiles>();
  return train_report(run_dir, timelines_on_disk(run_dir, ignored), *ignored);
}

}  // namespace

TimelineSource timelines_on_disk(const fs::path& run_dir) {
  return timelines_on_disk(run_dir, std::make_shared<IgnoredFiles>());
}

std::string write_train_report(const fs::path& run_dir) {
  if (timing::timeline_files(run_dir).empty()) throw no_timelines(run_dir);
  return train_report_on_disk(run_dir);
}

std::string write_prep_report(const fs::path& cache_dir) { return prep_report(cache_dir, timelines_of(cache_dir)); }

std::string write_report(const fs::path& dir) {
  const auto files = timing::timeline_files(dir);
  if (files.empty()) throw no_timelines(dir);
  // The job from one file; a prep job has few ranks and is reported in memory.
  if (timing::read_timeline(files.begin()->second).job == "prep") return prep_report(dir, timelines_of(dir));
  return train_report_on_disk(dir);
}

}  // namespace sluice::report
