#pragma once
// The per-rank timeline file: everything one rank recorded about a run, written at exit (and on a
// deadline or error, with what it had) to RUN_DIR/timeline/rank-N.json; `sluice report` reads
// them one at a time. At the end of a run rank 0 checks that it sees every rank's file (only
// their sizes travel) and has the ones it cannot see sent over, so a run directory on a node-local
// disk still gets the whole set on rank 0's node (runtime/rank_timing.cpp).
//
// FORMAT "sluice-timeline/1" (JSON object):
//   format        "sluice-timeline/1"
//   job           "train" | "prep"
//   rank, world_size, host, gpu (-1 = CPU)
//   role          "data" | "model" | "data_and_model" | "prep"; "model (python)" for a Python
//                 model rank (docs/python.md)
//   feeds         model ranks this data rank feeds;  fed_by: the data rank feeding a model rank (-1)
//   status        "finished" | "stopped" (preempted, checkpointed) | "failed"
//   error         the error that ended the rank ("" when none)
//   waiting_for   the rank this rank was waiting for when it failed (-1 unknown or none)
//   clock         ClockAlignment::to_json(): local = rank-0 time + offset_ns + drift*(local - start.local_ns)
//   lanes         lane (thread) names, index = lane id; lane 0 is the main thread
//   stages        stage names, index = the stage column of `spans`
//   spans         [[lane, stage, start_ns, end_ns, step, bytes, peer, sequence], ...] in LOCAL
//                 now_ns() time (see timing/span_recorder.h for the fields)
//   counter_names names, index = the counter column of `counters`
//   counters      [[counter, lane, t_ns, value], ...]  (local time)
//   dropped_spans spans overwritten in full rings (the oldest)
//   channels      [{name, peer, direction: "send"|"receive", batches, bytes, wait_seconds,
//                  transfer_seconds}]: per-channel counts; batches = the next sequence number
//   injected_delay InjectedDelay::to_json() (null when none)
//   settings      the run's settings the report uses (train.checkpoint_every, train.log_every,
//                 train.validation_every, train.credits, cache.shard_size, train.batch_size, ...)
//   summary       the rank's totals (the same object as RUN_DIR/ranks/rank-N.json)
//   resources     CpuWatch::to_json() (timing/cpu_watch.h): CPU time, faults, context switches, the
//                 intervals in which the process did not run (stopped or starved), its cgroup's
//                 CPU quota; null when not measured
//
// In memory, resources' two long lists (resources.stalls and resources.storage_reads.intervals,
// thousands of intervals on a loaded machine: most of a file then) are held natively in
// RankTimeline::stalls and ::storage_reads, as the spans are, and `resources` holds the rest;
// to_json() puts them back in place, so a file reads and writes back the same.
#include <array>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/clock_sync.h"
#include "timing/span_recorder.h"

namespace sluice::timing {

inline constexpr const char* timeline_format = "sluice-timeline/1";

struct RankTimeline {
  std::string job = "train";
  int rank = 0;
  int world_size = 1;
  std::string host;
  int gpu = -1;
  std::string role;
  std::vector<int> feeds;
  int fed_by = -1;
  std::string status = "finished";
  std::string error;
  int waiting_for = -1;
  ClockAlignment clock;
  std::vector<std::string> lanes;
  std::vector<Span> spans;
  std::vector<std::string> counter_names;
  std::vector<CounterSample> counters;
  uint64_t dropped_spans = 0;
  nlohmann::json channels = nlohmann::json::array();
  nlohmann::json injected_delay;  // null
  nlohmann::json settings = nlohmann::json::object();
  nlohmann::json summary = nlohmann::json::object();
  nlohmann::json resources;  // null: not measured; without `stalls` and `storage_reads.intervals`:
  // resources.stalls: [start_ns, end_ns] in which no thread of the process ran, on the spans' clock.
  std::vector<std::pair<int64_t, int64_t>> stalls;
  // resources.storage_reads.intervals: [start_ns, end_ns, read_bytes, cpu_ns], on the spans' clock
  // (kept only when resources.storage_reads is an object).
  std::vector<std::array<int64_t, 4>> storage_reads;

  // Takes lanes, spans, counters and dropped_spans from a recorder snapshot.
  void take(SpanRecorder::Snapshot snapshot);
  // Sets `resources` from CpuWatch::to_json(), its two long lists moved into stalls and
  // storage_reads. Throws nlohmann's type_error when a list holds something other than intervals.
  void set_resources(nlohmann::json resources);
  nlohmann::json to_json() const;
  // Throws DataError naming `source` (a file name) on a malformed timeline.
  static RankTimeline from_json(const nlohmann::json& json, const std::string& source);
};

// RUN_DIR/timeline/rank-N.json
std::filesystem::path timeline_path(const std::filesystem::path& run_dir, int rank);
void write_timeline(const std::filesystem::path& run_dir, const RankTimeline& timeline);
// RUN_DIR/timeline/rank-N.json by rank N, without reading them; empty when there is no
// timeline folder.
std::map<int, std::filesystem::path> timeline_files(const std::filesystem::path& run_dir);
// One timeline file. Throws DataError naming the file when it is not valid JSON or malformed.
RankTimeline read_timeline(const std::filesystem::path& file);
// Every RUN_DIR/timeline/rank-*.json, sorted by rank: all of them in memory at once, for small
// runs and tests (the report reads them one at a time: timeline_files, read_timeline). Throws
// DataError naming a bad file; returns an empty vector when there is no timeline folder.
std::vector<RankTimeline> read_timelines(const std::filesystem::path& run_dir);

}  // namespace sluice::timing
