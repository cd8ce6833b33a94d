#pragma once
// The train run's analysis, from every rank's timeline (timing/timeline_file.h): spans aligned to
// rank 0's clock, per-step records on model ranks, the steady-state window, per-rank and per-role
// breakdowns, data-rank stage totals, the clock check and what a failed run left behind. The
// verdict rules (stall_verdicts.h) and the documents (report_documents.h) read only this.
//
// A step on a model rank runs from the start of one batch_wait span to the start of the next (the
// last step ends with the rank's last model-stage span); its stage durations are the model-stage
// spans (allreduce_overlapped excluded: it runs on its own lane, hidden under backward) that
// start inside it. Steady state drops each model rank's first max(5, ceil(10%)) steps.
//
// SCALE. The analysis reads the timelines one at a time from a TimelineSource and keeps, per
// rank, only what the verdicts need: its identity, status, channels, summary and counters, and on
// a model rank one StepRecord per step (about 100 bytes). The spans themselves are dropped once
// the rank is summarised, except those other ranks' numbers depend on, kept as small intervals:
// the data ranks' sends and the batch waits naming them (transfer exposure, causality), and the
// rank's CPU stall and storage-read intervals (RankStalls: judged against the steady window at
// the end). The data ranks are read a second time, once the steady window (which needs every
// model rank) is known. So memory is the fixed part per rank plus ~100 bytes per model step, ~70
// bytes per batch and 16 bytes per stall interval, not the ~500 bytes per span (and several KB of
// JSON) of holding every timeline. Nothing that compares a rank with the others copies the
// others' values per rank (quadratic in ranks): they are pooled and sorted once.
//
// LONG RUNS. The per-step and per-batch part is bounded whatever the run's length: a model rank's
// steps are analysed in a window of at most max_analysed_steps steady steps (fewer above 4,096
// ranks: analysed_steps_for), its last ones (the
// same rule on every rank, so ranks in lockstep share the window's global steps). Only that window
// is kept per rank: its StepRecords, batch waits and flow ends, the data ranks' sends and stalls
// inside it (read in the second pass, once the window is known), and a capped model rank's stall
// and storage-read intervals near it. The whole run is kept in summaries whose size does not grow
// with the ranks: the job's per-step series (JobStep: one entry per global step, pooled over the
// model ranks, which the cyclic-stall rule reads over every steady step) and the whole run's
// steady totals (WholeRun). A run whose model ranks have at most max_analysed_steps steady steps
// (up to 556 steps) is analysed whole, as before; report.json's `analysis_window` says which steps a
// longer one's numbers cover and what was left out (docs/report.md, "Long runs").
#include <array>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/cpu_analysis.h"
#include "report/hang_facts.h"
#include "report/robust_stats.h"
#include "timing/timeline_file.h"

namespace sluice::report {

using timing::RankTimeline;
using timing::Stage;

inline constexpr size_t min_steady_steps = 20;
inline constexpr size_t min_warmup_steps = 5;
// The most steady steps of a model rank the analysis keeps (LONG RUNS above): plenty for the
// percentiles and the straggler rule (a pool of hundreds of steps per rank), and 4,096 ranks of
// such windows fit in well under the report's 2 GB (docs/performance.md). A cyclic stall is looked
// for in the job's series of every step, so its period is not limited by the window.
inline constexpr size_t max_analysed_steps = 500;
// ... and fewer on a large job: the analysed steps of every model rank together stay within a
// budget (2^21 steps, ~220 MB of StepRecords and as much again of the batch waits, flow ends and
// stalls kept beside them), a rank's window never below min_analysed_steps. 500 up to 4,096
// ranks, 256 at 8,192, 128 at 16,384: the rules still pool 2 million steps.
inline constexpr size_t analysed_step_budget = size_t{1} << 21;
inline constexpr size_t min_analysed_steps = 100;
size_t analysed_steps_for(int world_size);
// Ranks whose counter samples (queue depth, credits) are kept for report.html's chart: the first
// ones by rank.
inline constexpr size_t counter_chart_ranks = 8;

// The model stages a step is split into, in the order tables show them.
inline constexpr std::array<Stage, 8> model_step_stages = {
    Stage::batch_wait, Stage::forward,  Stage::backward,   Stage::allreduce_exposed,
    Stage::optimizer,  Stage::sync,     Stage::validation, Stage::checkpoint};
// The data-rank stages, reader lanes first.
inline constexpr std::array<Stage, 7> data_stages = {Stage::cache_read,     Stage::collate,    Stage::wait_for_reader,
                                                     Stage::host_to_device, Stage::gpu_work,   Stage::credit_wait,
                                                     Stage::send};

// "rank 3 · host · GPU1 · model" (GPU shown as CPU when the rank has none).
std::string describe_rank(const RankTimeline& timeline);

// The same timeline with every span, counter sample, stall interval and storage-read interval on
// the reference (rank 0) clock (in place when given an rvalue: a timeline is ~100 KB of spans).
RankTimeline align_to_reference(RankTimeline timeline);

// The position of a model stage in model_step_stages, model_step_stages.size() for any other.
constexpr size_t model_stage_index(Stage stage) {
  for (size_t i = 0; i < model_step_stages.size(); ++i) {
    if (model_step_stages[i] == stage) return i;
  }
  return model_step_stages.size();
}

struct StepRecord {
  int64_t step = -1;       // global step of the batch_wait that opened it
  int64_t start_ns = 0;    // aligned
  int64_t end_ns = 0;
  double seconds = 0;      // wall time of the step
  // Seconds of each model stage starting inside it, indexed as model_step_stages.
  std::array<double, model_step_stages.size()> stage_seconds{};
  bool steady = false;

  double stage(Stage stage) const {
    const size_t i = model_stage_index(stage);
    return i < stage_seconds.size() ? stage_seconds[i] : 0;
  }
  // The rank's own work in the step: forward + backward + optimizer. In synchronous data
  // parallelism every rank's wall step time is equalised by the all-reduce; this is not.
  double busy_seconds() const;
};

// A stage's share of a model rank's steady steps.
struct StageBreakdown {
  Distribution per_step;  // seconds per steady step
  double fraction = 0;    // total / total steady step time
};

struct ModelRankAnalysis {
  int rank = 0;
  std::string name;  // describe_rank
  std::string host;
  int gpu = -1;
  int fed_by = -1;
  std::vector<StepRecord> steps;  // in order: every step, or the analysed window alone when capped
  size_t recorded_steps = 0;      // steps in its timeline (steps.size() unless capped)
  size_t warmup_steps = 0;
  size_t steady_steps = 0;        // analysed: at most SteadyWindow::max_steps
  size_t left_out_steps = 0;      // steady steps before the analysed window (0 unless capped)
  bool capped = false;            // more steady steps than SteadyWindow::max_steps: steps holds the window
  double steady_seconds = 0;  // sum of steady step times
  Distribution step_seconds;  // steady
  Distribution busy_seconds;  // steady forward+backward+optimizer
  std::map<Stage, StageBreakdown> stages;
  double input_wait_fraction = 0;         // batch_wait / step time (steady)
  double allreduce_exposed_fraction = 0;  // allreduce_exposed / step time (steady)
  double transfer_exposed_fraction = 0;   // batch_wait overlapped by its data rank's sends / step time
  int64_t allreduce_bytes = 0;            // bytes named by allreduce spans in steady steps
  double allreduce_seconds = 0;           // exposed + overlapped seconds in steady steps
  // GPU busy: the GPU time of its steady steps (gpu_step spans, CUDA events around each step's
  // GPU work) over their wall time; nullopt when the rank timed no GPU work (a CPU model rank).
  std::optional<double> gpu_busy_fraction;
};

struct DataRankAnalysis {
  int rank = 0;
  std::string name;
  std::string host;
  int gpu = -1;
  std::vector<int> feeds;
  double window_seconds = 0;   // the model ranks' steady window this rank's numbers cover
  int reader_lanes = 0;        // lanes that recorded cache_read or collate
  std::map<Stage, double> stage_seconds;  // spans starting in the window
  // Main-lane stages: seconds / window. Reader stages: seconds / (window x reader lanes).
  std::map<Stage, double> stage_fraction;
  int64_t batches_sent = 0;
  int64_t bytes_sent = 0;
  double send_bandwidth = 0;             // bytes per second inside send spans
  // A send span also holds the time a transport waits for the model rank to take the batch (the
  // mpi transport moves bytes only while the receiver is in a channel call). The part during which
  // a model rank it feeds waited for a batch (overlap with their batch_wait spans) is exposed
  // transfer; the rest is the data rank waiting on its model ranks, like credit_wait.
  double send_exposed_fraction = 0;      // of the window
  double waiting_on_model_fraction = 0;  // (credit_wait + send not exposed) / window
  std::optional<double> queue_depth_mean;  // counter "queue_depth" in the window
  std::optional<double> credits_mean;      // counter "credits"
  std::vector<double> batch_busy_seconds;  // cache_read + collate per batch (steady window)
  // The stage a data rank spends most of its time in, among cache_read, collate (per reader
  // lane), host_to_device, gpu_work and send (main lane; its exposed part only).
  Stage busiest_stage = Stage::cache_read;
  double busiest_fraction = 0;
};

struct CausalityCheck {
  int64_t pairs_checked = 0;       // batch_wait spans with a matching send
  int64_t violations = 0;          // receive ends before its send starts, aligned time
  int64_t violations_unaligned = 0;  // the same on the ranks' local clocks
  int64_t worst_violation_ns = 0;  // aligned
  std::string example;             // the first violation, for the reader
  int example_data_rank = -1;      // whose send `example` is (the first in rank order is kept)
};

struct ClockSummary {
  int64_t max_uncertainty_ns = 0;
  int worst_rank = 0;
  CausalityCheck causality;
};

// The steady steps the numbers and verdicts cover: every model rank's steady steps, or, when a
// rank has more than max_steps of them, its last max_steps (capped).
struct SteadyWindow {
  size_t max_steps = max_analysed_steps;  // the window's length on this job: analysed_steps_for(world size)
  bool enough = false;   // at least min_steady_steps on every model rank
  size_t steady_steps = 0;  // the fewest analysed steady steps of any model rank
  size_t warmup_steps = 0;  // the most dropped
  int64_t first_step = -1;
  int64_t last_step = -1;
  int64_t start_ns = 0;  // aligned, across model ranks
  int64_t end_ns = 0;
  bool capped = false;         // some model rank's steady steps were more than max_steps
  size_t left_out_steps = 0;   // the most steady steps any model rank had before its window
  // Every steady step recorded (the window's first_step/last_step when not capped).
  int64_t recorded_first_step = -1;
  int64_t recorded_last_step = -1;
  double seconds() const { return static_cast<double>(end_ns - start_ns) * 1e-9; }
};

// One global step of the job, pooled over the model ranks that recorded it (every step of the
// run, not only the analysed window: one entry per step, whatever the rank count).
struct JobStep {
  int64_t step = 0;
  double seconds = 0;        // mean wall step time
  int64_t start_ns = 0;      // aligned: the earliest start and the latest end of it on any rank
  int64_t end_ns = 0;
  size_t steady_ranks = 0;   // ranks on which it is a steady step (recorded, warm-up excluded)
  // Mean seconds of each model stage over those ranks, indexed as model_step_stages.
  std::array<double, model_step_stages.size()> stage_seconds{};
};

// Every steady step every model rank recorded, pooled: totals that cost the same whatever the run
// length (the analysed window's numbers are beside them in TrainAnalysis).
struct WholeRun {
  size_t steady_steps = 0;    // summed over model ranks
  double steady_seconds = 0;
  std::array<double, model_step_stages.size()> stage_seconds{};
  double fraction(Stage stage) const {
    const size_t i = model_stage_index(stage);
    return steady_seconds > 0 && i < stage_seconds.size() ? stage_seconds[i] / steady_seconds : 0;
  }
  double step_seconds_mean() const {
    return steady_steps > 0 ? steady_seconds / static_cast<double>(steady_steps) : 0;
  }
};

struct TrainAnalysis {
  // Every rank's timeline aligned to rank 0, sorted by rank, WITHOUT its spans, stalls and
  // storage reads (dropped once analysed, the intervals kept in `cpu`'s input; the files keep
  // them): identity, status, channels, settings, summary, and the counter samples of the first
  // counter_chart_ranks ranks that have any (the others' are dropped: report.html charts those).
  std::vector<RankTimeline> timelines;
  int64_t counters_start_ns = INT64_MAX;  // the earliest counter sample of any rank (aligned)
  int world_size = 0;
  nlohmann::json settings = nlohmann::json::object();  // from the first timeline that has them
  nlohmann::json injected_delay;                        // the first non-null one
  std::vector<ModelRankAnalysis> model_ranks;
  std::vector<DataRankAnalysis> data_ranks;
  SteadyWindow steady;
  // The model role pooled: steady step time and stage shares over every model rank.
  Distribution role_step_seconds;
  std::map<Stage, StageBreakdown> role_stages;
  double input_wait_fraction = 0;         // sum batch_wait / sum step time, every model rank
  double allreduce_exposed_fraction = 0;
  double transfer_exposed_fraction = 0;
  // The model ranks' GPU busy share pooled (GPU time / steady time over the ranks that timed their
  // GPU work) and the least busy of them; nullopt when none did.
  std::optional<double> gpu_busy_fraction;
  int gpu_busy_lowest_rank = -1;
  double gpu_busy_lowest_fraction = 0;
  // Per global step of the whole run (steady and warm-up, analysed or not), in step order.
  std::vector<JobStep> job_steps;
  WholeRun whole_run;
  ClockSummary clock;
  HangFacts hang;
  uint64_t dropped_spans = 0;
  // Per rank, whether it got the CPU over the steady window (cpu_analysis.h), sorted by rank.
  std::vector<RankCpu> cpu;
  // The rank's entry in `cpu` when it was measured, else null.
  const RankCpu* cpu_of(int rank) const;
  // Per rank, sorted: the extent of its aligned spans and its spans + counter samples, from which
  // trace.json's selection is planned (chrome_trace.h).
  struct RankVolume {
    int rank = 0;
    int64_t start_ns = INT64_MAX, end_ns = INT64_MIN;
    size_t events = 0;
  };
  std::vector<RankVolume> volume;
  // RUN_DIR/padding.json ("sluice-padding/1", runtime/train/padding_summary.h): the padding of the
  // planned batches per bucket; null when the run did not write one. Set by the caller.
  nlohmann::json padding;
  // The validation passes of the run's first model rank with any (RUN_DIR/ranks/rank-N.json
  // "validation": {global_step, loss, and with train.mixture "corpora", each cache's mean loss}),
  // as {rank, passes}; null when no rank file has one. Set by the caller.
  nlohmann::json validation;
  // RUN_DIR/restarts.json ("sluice-restarts/1", supervisor/supervisor.h): the in-job restarts of
  // this run; null when it was not supervised. Set by the caller.
  nlohmann::json restarts;
  // Timeline files the source left out as not this run's (write_report.h), "rank-7.json: ..." each,
  // in file order; set by the caller.
  std::vector<std::string> ignored_timelines;
};

// Where the analysis reads timelines from, one at a time: calls `visit` with each timeline whose
// rank `wanted` accepts (local clocks, in any order); the visitor owns what it is given (it aligns
// it in place and keeps what it needs; a timeline read from a file is moved in, not copied). A
// source may be asked more than once.
using TimelineVisitor = std::function<void(RankTimeline)>;
using TimelineSource = std::function<void(const std::function<bool(int rank)>& wanted, const TimelineVisitor& visit)>;

// Timelines held in memory (the tests); `timelines` must outlive the source.
TimelineSource timelines_in(const std::vector<RankTimeline>& timelines);

// Never throws on thin data: a run with too few steps gets steady.enough = false.
TrainAnalysis analyze_train(const TimelineSource& source);
// `timelines` as read_timelines returns them (local clocks).
TrainAnalysis analyze_train(const std::vector<RankTimeline>& timelines);

}  // namespace sluice::report
