#pragma once
// Synthetic train and prep timelines with known answers for the report's tests. Every model rank
// runs the same global steps in lockstep (synchronous data parallelism): a step is batch_wait,
// forward, backward, allreduce_exposed (waiting for the slowest rank plus the all-reduce itself),
// optimizer, sync. Data rank 0 feeds every model rank: a send per batch just before the batch_wait
// ends, the gap before it filled with wait_for_reader or credit_wait, cache_read/collate on two
// reader lanes. Times are built on the reference clock, then shifted by each rank's skew.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "report/stall_verdicts.h"
#include "timing/timeline_file.h"

namespace sluice::report::testing {

using timing::RankTimeline;
using timing::Span;
using timing::Stage;

struct SyntheticTrain {
  int model_ranks = 2;
  int steps = 80;
  int warmup_steps = 5;        // these steps take warmup_seconds extra forward time
  double warmup_seconds = 1.0;
  double forward = 0.040, backward = 0.050, optimizer = 0.010, sync = 0.0;
  double allreduce = 0.001;    // the all-reduce itself, exposed after backward
  double batch_wait = 0.001;   // every step
  double noise = 0.0005;       // +- uniform noise on forward (deterministic seed)
  // Extra seconds: per (model rank, step) on forward; per step on batch_wait.
  std::function<double(int rank, int64_t step)> extra_forward = [](int, int64_t) { return 0.0; };
  std::function<double(int64_t step)> extra_wait = [](int64_t) { return 0.0; };
  // Extra backward seconds per (model rank, step): compute, or a wait for a peer hidden inside
  // backward (CPU ranks whose bucket reductions block there).
  std::function<double(int rank, int64_t step)> extra_backward = [](int, int64_t) { return 0.0; };
  // The data rank: what fills its main lane between sends, and its readers' share of a step.
  Stage data_wait_stage = Stage::wait_for_reader;
  double reader_busy_share = 0.9;  // cache_read per reader lane, as a share of the step
  double queue_depth = 0;
  double send_seconds = 0.001;  // each send span; it starts 2 ms x model rank before the batch_wait ends
  // Per model rank (index rank - 1): a gpu_step span in every step covering this share of it, on
  // the lane "gpu" (CUDA events); empty: the model ranks time no GPU work (CPU ranks).
  std::vector<double> gpu_busy;
  // Clock: local = reference + skew_ns[rank]; the recorded offset is the skew unless
  // record_offsets is false (a broken alignment).
  std::vector<int64_t> skew_ns;
  bool record_offsets = true;
  nlohmann::json settings = {{"train.checkpoint_every", 100}, {"train.validation_every", 50},
                             {"train.log_every", 10},        {"train.credits", 3},
                             {"train.reader_threads", 2},    {"roles.data_per_node", 1},
                             {"cache.shard_size", 64},       {"train.batch_size", 4}};
  std::string host = "node";
};

inline std::vector<RankTimeline> make_train_timelines(const SyntheticTrain& run) {
  const int world = run.model_ranks + 1;
  std::vector<RankTimeline> timelines(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    RankTimeline& t = timelines[static_cast<size_t>(r)];
    t.job = "train";
    t.rank = r;
    t.world_size = world;
    t.host = run.host + std::to_string(r);
    t.gpu = r == 0 ? -1 : r - 1;
    t.role = r == 0 ? "data" : "model";
    t.fed_by = r == 0 ? -1 : 0;
    t.settings = run.settings;
    t.lanes = r == 0 ? std::vector<std::string>{"main", "reader 1", "reader 2"}
                     : std::vector<std::string>{"main", "allreduce", "gpu"};
    t.counter_names = r == 0 ? std::vector<std::string>{"queue_depth", "credits"} : std::vector<std::string>{};
    t.channels = nlohmann::json::array();
  }
  for (int m = 1; m < world; ++m) timelines[0].feeds.push_back(m);
  const auto ns = [](double seconds) { return static_cast<int64_t>(seconds * 1e9); };
  std::mt19937_64 random(42);
  std::uniform_real_distribution<double> noise(-run.noise, run.noise);
  int64_t t0 = ns(100.0);
  std::vector<Span> sends;
  for (int64_t step = 0; step < run.steps; ++step) {
    const double wait = run.batch_wait + run.extra_wait(step);
    std::vector<double> busy(static_cast<size_t>(world), 0), forward(static_cast<size_t>(world), 0);
    double slowest = 0;
    for (int m = 1; m < world; ++m) {
      forward[static_cast<size_t>(m)] = run.forward + run.extra_forward(m, step) + noise(random) +
                                        (step < run.warmup_steps ? run.warmup_seconds : 0);
      busy[static_cast<size_t>(m)] = forward[static_cast<size_t>(m)] + run.backward + run.extra_backward(m, step);
      slowest = std::max(slowest, busy[static_cast<size_t>(m)]);
    }
    const double step_seconds = wait + slowest + run.allreduce + run.optimizer + run.sync;
    for (int m = 1; m < world; ++m) {
      auto& spans = timelines[static_cast<size_t>(m)].spans;
      int64_t at = t0;
      const auto add = [&](Stage stage, double seconds, int32_t peer = -1, int64_t sequence = -1) {
        Span s;
        s.stage = stage;
        s.start_ns = at;
        s.end_ns = at + ns(seconds);
        s.step = step;
        s.peer = peer;
        s.sequence = sequence;
        spans.push_back(s);
        at = s.end_ns;
      };
      add(Stage::batch_wait, wait, 0, step);
      if (static_cast<size_t>(m - 1) < run.gpu_busy.size()) {
        Span gpu;
        gpu.lane = 2;
        gpu.stage = Stage::gpu_step;
        gpu.start_ns = at;
        gpu.end_ns = at + ns(run.gpu_busy[static_cast<size_t>(m - 1)] * step_seconds);
        gpu.step = step;
        spans.push_back(gpu);
      }
      add(Stage::forward, forward[static_cast<size_t>(m)]);
      add(Stage::backward, run.backward + run.extra_backward(m, step));
      add(Stage::allreduce_exposed, slowest - busy[static_cast<size_t>(m)] + run.allreduce);
      spans.back().bytes = 4'000'000;
      add(Stage::optimizer, run.optimizer);
      if (run.sync > 0) add(Stage::sync, run.sync);
      // The batch for this step: sent just before the batch_wait ends (model rank m's sends are
      // staggered by 2 ms so that they do not overlap on the data rank's main lane).
      Span send;
      send.stage = Stage::send;
      send.start_ns = t0 + ns(wait) - ns(0.002 * m) - ns(run.send_seconds - 0.001);
      send.end_ns = send.start_ns + ns(run.send_seconds);
      send.step = step;
      send.peer = m;
      send.sequence = step;
      send.bytes = 1'000'000;
      sends.push_back(send);
      // Its reading and collating, on reader lane m (mod 2), during the previous step.
      Span read;
      read.lane = static_cast<uint16_t>(1 + (m - 1) % 2);
      read.stage = Stage::cache_read;
      read.step = step;
      read.end_ns = send.start_ns - ns(0.0005);
      read.start_ns = read.end_ns - ns(run.reader_busy_share * step_seconds / ((run.model_ranks + 1) / 2));
      Span collate = read;
      collate.stage = Stage::collate;
      collate.start_ns = read.end_ns;
      collate.end_ns = read.end_ns + ns(0.0002);
      timelines[0].spans.push_back(read);
      timelines[0].spans.push_back(collate);
    }
    timelines[0].counters.push_back({t0, run.queue_depth, 0, 0});
    timelines[0].counters.push_back({t0, 3 - run.queue_depth, 1, 0});
    t0 += ns(step_seconds);
  }
  std::sort(sends.begin(), sends.end(), [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  int64_t free_from = sends.empty() ? 0 : sends.front().start_ns;
  for (const Span& send : sends) {
    if (send.start_ns > free_from) {
      Span gap;
      gap.stage = run.data_wait_stage;
      gap.start_ns = free_from;
      gap.end_ns = send.start_ns;
      gap.step = send.step;
      gap.peer = run.data_wait_stage == Stage::credit_wait ? send.peer : -1;
      timelines[0].spans.push_back(gap);
    }
    timelines[0].spans.push_back(send);
    free_from = send.end_ns;
  }
  for (auto& t : timelines) {
    const int64_t skew = static_cast<size_t>(t.rank) < run.skew_ns.size() ? run.skew_ns[static_cast<size_t>(t.rank)] : 0;
    for (Span& s : t.spans) {
      s.start_ns += skew;
      s.end_ns += skew;
    }
    for (auto& c : t.counters) c.t_ns += skew;
    t.clock.start.local_ns = ns(100.0) + skew;
    t.clock.start.offset_ns = run.record_offsets ? skew : 0;
    t.clock.start.uncertainty_ns = 20'000;
    std::sort(t.spans.begin(), t.spans.end(), [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    int64_t sent = 0;
    for (const Span& s : t.spans) sent += s.stage == Stage::send ? 1 : 0;
    if (t.rank == 0) {
      for (int m : t.feeds) {
        t.channels.push_back({{"name", "feed 0 -> " + std::to_string(m)}, {"peer", m}, {"direction", "send"},
                              {"batches", run.steps}, {"bytes", 0}, {"wait_seconds", 0}, {"transfer_seconds", 0}});
      }
    } else {
      t.channels.push_back({{"name", "feed 0 -> " + std::to_string(t.rank)}, {"peer", 0}, {"direction", "receive"},
                            {"batches", run.steps}, {"bytes", 0}, {"wait_seconds", 0}, {"transfer_seconds", 0}});
    }
  }
  return timelines;
}

// Prep ranks: `rows_per_rank` rows each, every row decode + features on a worker lane and a write
// on the I/O lane; `slow_factor(rank)` stretches a rank's rows.
inline std::vector<RankTimeline> make_prep_timelines(int ranks, int rows_per_rank,
                                                     const std::function<double(int)>& slow_factor) {
  std::vector<RankTimeline> timelines;
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  for (int r = 0; r < ranks; ++r) {
    RankTimeline t;
    t.job = "prep";
    t.rank = r;
    t.world_size = ranks;
    t.host = "prep" + std::to_string(r);
    t.role = "prep";
    t.lanes = {"main", "worker 1", "writer"};
    int64_t at = 1'000'000'000;
    for (int i = 0; i < rows_per_rank; ++i) {
      const int64_t row = static_cast<int64_t>(r) * rows_per_rank + i;
      const double factor = slow_factor(r) * noise(random);
      const auto add = [&](Stage stage, uint16_t lane, double seconds) {
        Span s;
        s.stage = stage;
        s.lane = lane;
        s.step = row;
        s.start_ns = at;
        s.end_ns = at + static_cast<int64_t>(seconds * 1e9);
        at = s.end_ns;
        t.spans.push_back(s);
      };
      add(Stage::decode, 1, 0.004 * factor);
      add(Stage::features, 1, 0.006 * factor);
      add(Stage::write, 2, 0.001);
    }
    timelines.push_back(t);
  }
  return timelines;
}

// The first start and the last end of `t`'s spans.
inline std::pair<int64_t, int64_t> span_extent(const RankTimeline& t) {
  int64_t start = INT64_MAX, end = INT64_MIN;
  for (const auto& s : t.spans) {
    start = std::min(start, s.start_ns);
    end = std::max(end, s.end_ns);
  }
  return {start, end};
}

// What CpuWatch would record for a process stopped `stop_ms` of every `period_ms` over its spans.
inline nlohmann::json resources_stopped(const RankTimeline& t, int64_t stop_ms, int64_t period_ms) {
  using nlohmann::json;
  const auto [start, end] = span_extent(t);
  json stalls = json::array();
  double stalled = 0;
  for (int64_t at = start; stop_ms > 0 && at + stop_ms * 1'000'000 <= end; at += period_ms * 1'000'000) {
    stalls.push_back({at, at + stop_ms * 1'000'000});
    stalled += 1e-3 * static_cast<double>(stop_ms);
  }
  const double wall = static_cast<double>(end - start) * 1e-9;
  return {{"wall_seconds", wall},           {"cpu_user_seconds", 0.1 * wall}, {"cpu_system_seconds", 0.0},
          {"cpu_cores_mean", 0.1},          {"minor_faults", 100},            {"major_faults", 0},
          {"voluntary_switches", 1000},     {"involuntary_switches", 10},     {"stalled_seconds", stalled},
          {"stall_count", stalls.size()},   {"longest_stall_seconds", 1e-3 * static_cast<double>(stop_ms)},
          {"ran_fraction", 1 - stalled / wall}, {"stalls", stalls},           {"stalls_dropped", 0},
          {"threads", json::array()},       {"cgroup", nullptr}};
}

// What CpuWatch records for a process that fetched `bytes_per_s` from a block device over its
// spans, in 250 ms intervals, using `cores` of CPU meanwhile (resources.storage_reads).
inline nlohmann::json storage_reads(const RankTimeline& t, double bytes_per_s, double cores) {
  using nlohmann::json;
  const auto [start, end] = span_extent(t);
  json intervals = json::array();
  int64_t total = 0;
  for (int64_t at = start; at + 250'000'000 <= end; at += 250'000'000) {
    const auto bytes = static_cast<int64_t>(0.25 * bytes_per_s);
    intervals.push_back({at, at + 250'000'000, bytes, static_cast<int64_t>(0.25e9 * cores)});
    total += bytes;
  }
  return {{"read_bytes", total}, {"sample_ms", 250}, {"intervals", intervals}, {"intervals_dropped", 0}};
}

// `t`'s resources with storage_reads replaced by `reads` (its intervals into t.storage_reads).
inline void set_storage_reads(RankTimeline& t, const nlohmann::json& reads) {
  nlohmann::json resources = t.resources;
  resources["stalls"] = t.stalls;
  resources["storage_reads"] = reads;
  t.set_resources(resources);
}

// The verdict of `kind` (report.json's name: "input_bound") among `verdicts`, or nullptr; a name
// that is no verdict kind throws, so that a misspelt test does not pass by finding nothing.
inline const StallVerdict* find(const std::vector<StallVerdict>& verdicts, const std::string& kind) {
  const std::optional<VerdictKind> wanted = verdict_kind_from(kind);
  if (!wanted) throw std::invalid_argument("no verdict kind is called " + kind);
  for (const auto& v : verdicts) {
    if (v.kind == *wanted) return &v;
  }
  return nullptr;
}

}  // namespace sluice::report::testing
