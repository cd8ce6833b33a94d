#pragma once
// The prep job's analysis: per-rank throughput (rows/s, audio seconds/s), stage totals,
// stragglers among prep ranks and rejects by reason. Inputs: the prep ranks' timelines (job
// "prep", stages decode/resample/features/write, step = corpus row) and the cache's
// prep-report.json (runtime/prep/finalize.cpp: per-rank samples, audio seconds, rejects by reason).
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_analysis.h"
#include "report/stall_verdicts.h"

namespace sluice::report {

inline constexpr std::array<Stage, 4> prep_stages = {Stage::decode, Stage::resample, Stage::features, Stage::write};

// A prep rank's builder as it accounted for itself (prep-report.json, runtime/prep/rank_result.h):
// its wall time, the busy time of its one writer and of its workers, the writer's CPU time and
// the bytes of /mel it wrote. The write_bound rule reads these.
struct WriterFacts {
  int workers = 0;
  double wall_seconds = 0;
  double write_seconds = 0;         // the writer's appends and commits (fsync included)
  double worker_busy_seconds = 0;   // decode + text + features, summed over the workers
  double writer_cpu_seconds = 0;
  int64_t mel_bytes = 0;
};

struct PrepRankAnalysis {
  int rank = 0;
  std::string name;
  std::string host;
  std::string status;
  int64_t rows = 0;               // distinct corpus rows with a span
  double window_seconds = 0;      // first span start to last span end (aligned)
  double rows_per_second = 0;
  double audio_seconds = -1;      // from prep-report.json, -1 when unknown
  double audio_seconds_per_second = -1;
  int64_t rejects = -1;           // from prep-report.json
  std::map<Stage, double> stage_seconds;
  std::vector<double> row_busy_seconds;  // decode + resample + features + write per row
  Distribution row_seconds;
  WriterFacts writer;  // from prep-report.json; workers == 0 when it does not say
};

struct PrepAnalysis {
  std::vector<RankTimeline> timelines;  // aligned
  std::vector<PrepRankAnalysis> ranks;
  int world_size = 0;
  double job_seconds = 0;  // earliest span to latest span across ranks
  double rows_per_second = 0;
  nlohmann::json prep_report;  // null when the cache has none
  std::map<std::string, int64_t> reject_reasons;
  int64_t rejects = 0;
  int64_t corpus_rows = 0;
  std::vector<StallVerdict> verdicts;  // stragglers, hang, or a line saying none
  ClockSummary clock;
  HangFacts hang;
};

PrepAnalysis analyze_prep(const std::vector<RankTimeline>& timelines, const nlohmann::json& prep_report);

}  // namespace sluice::report
