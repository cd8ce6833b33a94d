#pragma once
// trace.json in the Chrome trace event format (Perfetto and chrome://tracing open it):
//   - one process per rank (pid = rank), named "rank 3 · host · GPU1 · model" (process_name);
//   - one thread per lane (tid = lane id), named after the lane (thread_name);
//   - an "X" complete event per span: name = stage, args {step, bytes, peer, sequence};
//   - a flow ("s" at the data rank's send, "f" with bp "e" inside the model rank's batch_wait) per
//     batch, id = flow_id(data rank, model rank, sequence), unique per (src, dst, seq);
//   - "C" counter events per counter sample (queue_depth, credits), named after the counter.
// Times are microseconds on rank 0's clock, relative to the earliest aligned span.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_analysis.h"
#include "timing/timeline_file.h"

namespace sluice::report {

// (src, dst, seq) -> one number below 2^53 (exact in JavaScript): src x world + dst in the high
// bits, the sequence in the low 28.
int64_t flow_id(int source, int destination, int64_t sequence, int world_size);

// TRACE AT SCALE. A trace of every span of thousands of ranks is gigabytes no viewer opens, so
// the report's trace.json holds a selection, planned from the analysis and bounded whatever the
// rank count or run length (at most trace_max_events events, ~150 bytes each: under 200 MB):
//   - ranks: all when the world has at most trace_max_ranks; else rank 0, every rank a verdict
//     names (and the data rank feeding a named model rank), then ranks evenly spaced over the
//     rest up to trace_max_ranks;
//   - steps: all when the selected ranks' events fit; else a window of consecutive steps in the
//     middle of the steady window, as many as fit.
// What was left out is written in the trace (otherData.selection) and in report.json
// (trace_selection) and report.md. The full data stays in RUN_DIR/timeline/.
inline constexpr size_t trace_max_ranks = 64;
inline constexpr size_t trace_max_events = 1'000'000;

struct TraceLimits {
  size_t max_ranks = trace_max_ranks;
  size_t max_events = trace_max_events;
};

struct TraceSelection {
  std::vector<int> ranks;         // sorted
  std::vector<int> named_ranks;   // the ones chosen because a verdict names them
  size_t ranks_left_out = 0;
  bool window = false;            // only the steps below (else the whole run)
  int64_t first_step = -1, last_step = -1;
  int64_t start_ns = INT64_MIN, end_ns = INT64_MAX;  // aligned: spans starting inside are kept
  size_t planned_events = 0;
  TraceLimits limits;
  int64_t origin_ns = 0;  // aligned time of ts 0
  int world_size = 0;

  nlohmann::json to_json() const;
  std::string describe() const;  // one sentence for report.md
};

// Every rank and every span of `aligned` (timelines on the reference clock): the prep report's
// trace, whose spans are one per sample and stage (~100,000 for an LJSpeech-size corpus).
TraceSelection whole_trace(const std::vector<timing::RankTimeline>& aligned);

// `verdict_ranks`: the ranks the verdicts name (StallVerdict::rank and the ranks in their numbers).
TraceSelection choose_trace(const TrainAnalysis& analysis, const std::vector<int>& verdict_ranks,
                            const TraceLimits& limits = {});

// Writes `file` (atomically) from the selected ranks, read one at a time from `source` (timelines
// as written, on their own clocks), event by event: memory is one timeline plus the selection's
// sends and batch waits (for the flows), never the whole trace. (Building the trace as one JSON
// tree first cost a prep of 20,400 clips 0.7 CPU-s, mostly in malloc's page faults.)
void write_chrome_trace(const std::filesystem::path& file, const TimelineSource& source,
                        const TraceSelection& selection);


}  // namespace sluice::report
