#include "report/run_analysis.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

namespace sluice::report {
namespace {

using timing::Span;

bool is_step_stage(Stage stage) {
  return std::find(model_step_stages.begin(), model_step_stages.end(), stage) != model_step_stages.end();
}
bool is_reader_stage(Stage stage) { return stage == Stage::cache_read || stage == Stage::collate; }

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

int64_t overlap_ns(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// Sorted, non-overlapping [start, end) intervals.
using Intervals = std::vector<std::pair<int64_t, int64_t>>;

Intervals merged(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  Intervals out;
  for (const auto& [a, b] : intervals) {
    if (!out.empty() && a <= out.back().second) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

int64_t overlap_with(const Intervals& intervals, int64_t a, int64_t b) {
  int64_t total = 0;
  auto it = std::lower_bound(intervals.begin(), intervals.end(), std::make_pair(a, INT64_MIN));
  if (it != intervals.begin()) --it;
  for (; it != intervals.end() && it->first < b; ++it) total += overlap_ns(a, b, it->first, it->second);
  return total;
}

// Per data rank: when its main thread was sending (to any model rank), and when any model rank it
// feeds was waiting for a batch from it. A data rank sends serially, so a send to one model rank
// also holds up another waiting model rank; and a transport may keep a send span open after the
// receiver took the bytes. Matching by overlap in time, not by sequence, counts both.
struct FeedIntervals {
  std::map<int, Intervals> sending;   // data rank -> its send spans
  std::map<int, Intervals> awaited;   // data rank -> batch_wait spans naming it as the peer
};

// Merges every list.
void merge_all(std::map<int, Intervals>& lists) {
  for (auto& [rank, list] : lists) list = merged(std::move(list));
}

std::vector<StepRecord> step_records(const RankTimeline& t) {
  std::vector<const Span*> waits, work;
  for (const Span& s : t.spans) {
    if (s.stage == Stage::batch_wait) waits.push_back(&s);
    if (is_step_stage(s.stage)) work.push_back(&s);
  }
  const auto by_start = [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; };
  std::sort(waits.begin(), waits.end(), by_start);
  std::sort(work.begin(), work.end(), by_start);
  std::vector<StepRecord> steps;
  steps.reserve(waits.size());
  size_t next_work = 0;
  for (size_t i = 0; i < waits.size(); ++i) {
    StepRecord record;
    record.step = waits[i]->step;
    record.start_ns = waits[i]->start_ns;
    const int64_t limit = i + 1 < waits.size() ? waits[i + 1]->start_ns : INT64_MAX;
    int64_t last_end = waits[i]->end_ns;
    while (next_work < work.size() && work[next_work]->start_ns < record.start_ns) ++next_work;
    while (next_work < work.size() && work[next_work]->start_ns < limit) {
      const Span& s = *work[next_work++];
      record.stage_seconds[model_stage_index(s.stage)] += seconds(s.end_ns - s.start_ns);
      last_end = std::max(last_end, s.end_ns);
    }
    record.end_ns = limit == INT64_MAX ? last_end : limit;
    record.seconds = seconds(record.end_ns - record.start_ns);
    steps.push_back(record);
  }
  return steps;
}

std::map<Stage, StageBreakdown> breakdown(const std::vector<const StepRecord*>& steps) {
  std::map<Stage, StageBreakdown> result;
  double total = 0;
  for (const StepRecord* s : steps) total += s->seconds;
  for (Stage stage : model_step_stages) {
    std::vector<double> values;
    for (const StepRecord* s : steps) values.push_back(s->stage(stage));
    StageBreakdown b;
    b.per_step = Distribution::of(values);
    b.fraction = total > 0 ? b.per_step.total / total : 0;
    result[stage] = b;
  }
  return result;
}

// A batch_wait of a model rank's steady steps: the data rank it waited for and when.
struct SteadyWait {
  int64_t start_ns = 0, end_ns = 0;
  int peer = -1;
};

// Per global step, pooled over the model ranks as they are read (JobStep, before the means).
struct JobStepSums {
  double seconds = 0;
  size_t ranks = 0;
  int64_t start_ns = INT64_MAX, end_ns = INT64_MIN;
  size_t steady_ranks = 0;
  std::array<double, model_step_stages.size()> stage_seconds{};
};
using JobSeries = std::map<int64_t, JobStepSums>;

// Every step of a model rank into the job's series and the whole run's totals: what stays of the
// steps outside the analysed window.
void add_to_whole_run(const std::vector<StepRecord>& steps, size_t warmup, JobSeries& job, WholeRun& whole) {
  auto at = job.begin();
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& s = steps[i];
    // A rank's steps ascend: the next one is usually the map's next node.
    if (at == job.end() || at->first != s.step) at = job.try_emplace(s.step).first;
    JobStepSums& sums = at->second;
    sums.seconds += s.seconds;
    ++sums.ranks;
    sums.start_ns = std::min(sums.start_ns, s.start_ns);
    sums.end_ns = std::max(sums.end_ns, s.end_ns);
    ++at;
    if (i < warmup) continue;
    ++sums.steady_ranks;
    for (size_t k = 0; k < model_step_stages.size(); ++k) {
      sums.stage_seconds[k] += s.stage_seconds[k];
      whole.stage_seconds[k] += s.stage_seconds[k];
    }
    ++whole.steady_steps;
    whole.steady_seconds += s.seconds;
  }
}

// Everything of a model rank but its transfer exposure, which needs its data rank's sends
// (transfer_exposed below); its steady batch waits go to `waits` for that. Steps beyond the
// analysed window go to the job's series and the whole run's totals only.
ModelRankAnalysis analyze_model_rank(const RankTimeline& t, std::vector<SteadyWait>& waits, JobSeries& job,
                                     WholeRun& whole, size_t max_steps) {
  ModelRankAnalysis m;
  m.rank = t.rank;
  m.name = describe_rank(t);
  m.host = t.host;
  m.gpu = t.gpu;
  m.fed_by = t.fed_by;
  m.steps = step_records(t);
  const size_t n = m.steps.size();
  m.recorded_steps = n;
  m.warmup_steps = std::min(n, std::max(min_warmup_steps, static_cast<size_t>(std::ceil(0.1 * static_cast<double>(n)))));
  add_to_whole_run(m.steps, m.warmup_steps, job, whole);
  // The analysed window: the last max_steps steady steps; the steps before it are dropped (freed:
  // the vector is rebuilt at its size).
  size_t first_steady = m.warmup_steps;
  if (n - m.warmup_steps > max_steps) {
    const size_t first_analysed = n - max_steps;
    m.capped = true;
    m.left_out_steps = first_analysed - m.warmup_steps;
    m.steps = std::vector<StepRecord>(m.steps.begin() + static_cast<std::ptrdiff_t>(first_analysed), m.steps.end());
    first_steady = 0;
  }
  m.steady_steps = m.steps.size() - first_steady;
  std::vector<const StepRecord*> steady;
  std::vector<double> step_times, busy_times;
  for (size_t i = first_steady; i < m.steps.size(); ++i) {
    m.steps[i].steady = true;
    steady.push_back(&m.steps[i]);
    step_times.push_back(m.steps[i].seconds);
    busy_times.push_back(m.steps[i].busy_seconds());
    m.steady_seconds += m.steps[i].seconds;
  }
  m.step_seconds = Distribution::of(step_times);
  m.busy_seconds = Distribution::of(busy_times);
  m.stages = breakdown(steady);
  m.input_wait_fraction = m.stages[Stage::batch_wait].fraction;
  m.allreduce_exposed_fraction = m.stages[Stage::allreduce_exposed].fraction;
  if (steady.empty()) return m;
  const int64_t first = steady.front()->start_ns, last = steady.back()->end_ns;
  std::optional<double> gpu_seconds;
  for (const Span& s : t.spans) {
    if (s.start_ns < first || s.start_ns >= last) continue;
    if (s.stage == Stage::gpu_step) gpu_seconds = gpu_seconds.value_or(0) + seconds(s.end_ns - s.start_ns);
    if (s.stage == Stage::allreduce_exposed || s.stage == Stage::allreduce_overlapped) {
      m.allreduce_bytes += s.bytes;
      m.allreduce_seconds += seconds(s.end_ns - s.start_ns);
    }
    if (s.stage == Stage::batch_wait) waits.push_back({s.start_ns, s.end_ns, s.peer});
  }
  if (gpu_seconds && m.steady_seconds > 0) m.gpu_busy_fraction = *gpu_seconds / m.steady_seconds;
  return m;
}

// The share of the model rank's steady time in which it waited for a batch while its data rank
// was sending.
double transfer_exposed(const ModelRankAnalysis& m, const std::vector<SteadyWait>& waits, const FeedIntervals& feed) {
  int64_t transfer_ns = 0;
  for (const SteadyWait& w : waits) {
    const auto sending = feed.sending.find(w.peer);
    if (sending != feed.sending.end()) transfer_ns += overlap_with(sending->second, w.start_ns, w.end_ns);
  }
  return m.steady_seconds > 0 ? seconds(transfer_ns) / m.steady_seconds : 0;
}

std::optional<double> counter_mean(const RankTimeline& t, const std::string& name, int64_t start, int64_t end) {
  const auto it = std::find(t.counter_names.begin(), t.counter_names.end(), name);
  if (it == t.counter_names.end()) return std::nullopt;
  const auto index = static_cast<uint16_t>(it - t.counter_names.begin());
  double in_sum = 0, all_sum = 0;
  size_t in_count = 0, all_count = 0;
  for (const auto& c : t.counters) {
    if (c.counter != index) continue;
    all_sum += c.value;
    ++all_count;
    if (c.t_ns >= start && c.t_ns < end) {
      in_sum += c.value;
      ++in_count;
    }
  }
  if (in_count > 0) return in_sum / static_cast<double>(in_count);
  if (all_count > 0) return all_sum / static_cast<double>(all_count);
  return std::nullopt;
}

// The first start and the last end of the rank's spans (0, 0 without spans).
void own_span_window(const RankTimeline& t, int64_t& start, int64_t& end) {
  start = INT64_MAX;
  end = INT64_MIN;
  for (const Span& s : t.spans) {
    start = std::min(start, s.start_ns);
    end = std::max(end, s.end_ns);
  }
  if (t.spans.empty()) start = end = 0;
}

// DataRankAnalysis::busiest_stage from its stage fractions (send: its exposed part only).
void set_busiest_stage(DataRankAnalysis& d) {
  d.busiest_fraction = -1;
  for (Stage stage : {Stage::cache_read, Stage::collate, Stage::host_to_device, Stage::gpu_work, Stage::send}) {
    const double fraction = stage == Stage::send ? d.send_exposed_fraction : d.stage_fraction[stage];
    if (fraction > d.busiest_fraction) {
      d.busiest_fraction = fraction;
      d.busiest_stage = stage;
    }
  }
}

DataRankAnalysis analyze_data_rank(const RankTimeline& t, int64_t start, int64_t end, const FeedIntervals& feed) {
  DataRankAnalysis d;
  d.rank = t.rank;
  d.name = describe_rank(t);
  d.host = t.host;
  d.gpu = t.gpu;
  d.feeds = t.feeds;
  if (end <= start) own_span_window(t, start, end);  // no model steps to bound the window
  d.window_seconds = seconds(end - start);
  std::set<uint16_t> reader_lanes;
  std::map<int64_t, double> busy_by_step;
  double send_seconds = 0, send_exposed = 0;
  for (const Span& s : t.spans) {
    if (is_reader_stage(s.stage)) reader_lanes.insert(s.lane);
    if (std::find(data_stages.begin(), data_stages.end(), s.stage) == data_stages.end()) continue;
    const int64_t inside = overlap_ns(s.start_ns, s.end_ns, start, end);
    if (inside <= 0 && !(s.start_ns >= start && s.start_ns < end)) continue;
    d.stage_seconds[s.stage] += seconds(inside);
    if (is_reader_stage(s.stage) && s.step >= 0) busy_by_step[s.step] += seconds(s.end_ns - s.start_ns);
    if (s.stage == Stage::send) {
      ++d.batches_sent;
      d.bytes_sent += s.bytes;
      send_seconds += seconds(s.end_ns - s.start_ns);
      const auto awaited = feed.awaited.find(t.rank);
      if (awaited != feed.awaited.end()) {
        send_exposed +=
            seconds(overlap_with(awaited->second, std::max(s.start_ns, start), std::min(s.end_ns, end)));
      }
    }
  }
  d.reader_lanes = static_cast<int>(reader_lanes.size());
  d.send_bandwidth = send_seconds > 0 ? static_cast<double>(d.bytes_sent) / send_seconds : 0;
  const double feeds = std::max<double>(1, static_cast<double>(t.feeds.size()));
  for (const auto& [step, busy] : busy_by_step) d.batch_busy_seconds.push_back(busy / feeds);
  for (Stage stage : data_stages) {
    const double lanes = is_reader_stage(stage) ? std::max(1, d.reader_lanes) : 1;
    const double value = d.stage_seconds.count(stage) ? d.stage_seconds[stage] : 0;
    d.stage_fraction[stage] = d.window_seconds > 0 ? value / (d.window_seconds * lanes) : 0;
  }
  if (d.window_seconds > 0) {
    d.send_exposed_fraction = send_exposed / d.window_seconds;
    d.waiting_on_model_fraction =
        d.stage_fraction[Stage::credit_wait] + std::max(0.0, d.stage_fraction[Stage::send] - d.send_exposed_fraction);
  }
  set_busiest_stage(d);
  d.queue_depth_mean = counter_mean(t, "queue_depth", start, end);
  d.credits_mean = counter_mean(t, "credits", start, end);
  return d;
}

// One end of a batch's flow: a send on its data rank (`at_ns` = its start) or the batch_wait on
// its model rank that took it (`at_ns` = its end), on the reference and on the local clock.
struct FlowEnd {
  int data_rank = 0, model_rank = 0;
  int64_t sequence = 0;
  int64_t at_ns = 0, local_ns = 0;
  bool operator<(const FlowEnd& o) const {
    return std::tie(data_rank, model_rank, sequence) < std::tie(o.data_rank, o.model_rank, o.sequence);
  }
};

// `raw` on its own clock: each end on the reference clock and on the rank's own. A receive is
// taken with its step (to keep those of the analysed window); a send only when a receive kept in
// `receives` (sorted) names it, since a send no receive names is never checked.
void collect_receives(const RankTimeline& raw, std::vector<std::pair<int64_t, FlowEnd>>& receives) {
  for (const Span& s : raw.spans) {
    if (s.sequence < 0 || s.stage != Stage::batch_wait) continue;
    receives.emplace_back(s.step, FlowEnd{s.peer, raw.rank, s.sequence, raw.clock.to_reference(s.end_ns), s.end_ns});
  }
}

std::vector<FlowEnd> collect_sends(const RankTimeline& raw, const std::vector<FlowEnd>& receives) {
  std::vector<FlowEnd> sends;
  for (const Span& s : raw.spans) {
    if (s.sequence < 0 || s.stage != Stage::send) continue;
    const FlowEnd send{raw.rank, s.peer, s.sequence, raw.clock.to_reference(s.start_ns), s.start_ns};
    if (std::binary_search(receives.begin(), receives.end(), send)) sends.push_back(send);
  }
  return sends;
}

// The received batches of one data rank against its sends, added to `check`: a receive that ends
// before its send starts is a clock error. A data rank's sends are checked as its timeline is read
// and then dropped: kept for every data rank they were a third of the report's memory at 16,384
// ranks. `receives`: every model rank's, sorted; `sends`: one data rank's.
void check_causality(std::vector<FlowEnd> sends, const std::vector<FlowEnd>& receives, CausalityCheck& check) {
  if (sends.empty()) return;
  std::stable_sort(sends.begin(), sends.end());  // equal keys keep their order: the last send wins
  const int data_rank = sends.front().data_rank;
  auto send = sends.begin();
  const auto first = std::lower_bound(receives.begin(), receives.end(), data_rank,
                                      [](const FlowEnd& r, int rank) { return r.data_rank < rank; });
  for (auto r = first; r != receives.end() && r->data_rank == data_rank; ++r) {
    while (send != sends.end() && *send < *r) ++send;
    if (send == sends.end() || *r < *send) continue;  // no send recorded for it (the last one wins)
    auto last = send;
    while (std::next(last) != sends.end() && !(*r < *std::next(last))) ++last;
    ++check.pairs_checked;
    if (last->local_ns - r->local_ns > 0) ++check.violations_unaligned;
    const int64_t early = last->at_ns - r->at_ns;
    if (early <= 0) continue;
    ++check.violations;
    if (early > check.worst_violation_ns) check.worst_violation_ns = early;
    // The example is the first violation in (data rank, model rank, batch) order, whatever order
    // the data ranks' timelines come in.
    if (check.example.empty() || data_rank < check.example_data_rank) {
      check.example_data_rank = data_rank;
      check.example = "rank " + std::to_string(r->model_rank) + " received batch " + std::to_string(r->sequence) +
                      " from rank " + std::to_string(r->data_rank) + " " + std::to_string(early / 1000) +
                      " us before it was sent";
    }
  }
}

}  // namespace

size_t analysed_steps_for(int world_size) {
  return std::clamp(analysed_step_budget / static_cast<size_t>(std::max(world_size, 1)), min_analysed_steps,
                    max_analysed_steps);
}

const RankCpu* TrainAnalysis::cpu_of(int rank) const {
  const auto it = std::lower_bound(cpu.begin(), cpu.end(), rank, [](const RankCpu& c, int r) { return c.rank < r; });
  return it != cpu.end() && it->rank == rank && it->measured ? &*it : nullptr;
}

double StepRecord::busy_seconds() const {
  return stage(Stage::forward) + stage(Stage::backward) + stage(Stage::optimizer);
}

std::string describe_rank(const RankTimeline& t) {
  const std::string device = t.gpu >= 0 ? "GPU" + std::to_string(t.gpu) : "CPU";
  return "rank " + std::to_string(t.rank) + " · " + (t.host.empty() ? "?" : t.host) + " · " + device + " · " + t.role;
}

RankTimeline align_to_reference(RankTimeline aligned) {
  const timing::ClockAlignment& clock = aligned.clock;
  for (Span& s : aligned.spans) {
    s.start_ns = clock.to_reference(s.start_ns);
    s.end_ns = clock.to_reference(s.end_ns);
  }
  for (auto& c : aligned.counters) c.t_ns = clock.to_reference(c.t_ns);
  for (auto& [start, end] : aligned.stalls) {
    start = clock.to_reference(start);
    end = clock.to_reference(end);
  }
  for (auto& read : aligned.storage_reads) {
    read[0] = clock.to_reference(read[0]);
    read[1] = clock.to_reference(read[1]);
  }
  return aligned;
}

namespace {

// What the first pass keeps of the ranks besides TrainAnalysis itself.
struct FirstPass {
  FeedIntervals feed;
  std::map<int, std::vector<SteadyWait>> steady_waits;  // model rank -> its steady batch waits
  std::vector<FlowEnd> receives;  // every model rank's, sorted before the second pass
  std::map<int, int64_t> last_steps;
  std::map<int, RankStalls> stalls;
  JobSeries job;
  std::set<int> counter_ranks;  // the ranks whose counter samples are kept (counter_chart_ranks)
  std::map<int, size_t> timeline_at;  // rank -> its index in TrainAnalysis::timelines
  std::set<int> data_ranks;  // ranks whose role feeds batches, read again in the second pass
};

// A model rank's batch waits and receives before this step are not kept: the one step before its
// analysed window still is, as another rank's window may start a little earlier on the clock.
int64_t first_kept_step(const ModelRankAnalysis& m) {
  return m.capped && !m.steps.empty() ? m.steps.front().step - 1 : INT64_MIN;
}

// Keeps the counter samples of the first counter_chart_ranks ranks that have any (by rank, in
// whatever order they come), frees the others'.
void keep_chart_counters(RankTimeline& t, TrainAnalysis& a, FirstPass& pass) {
  for (const auto& c : t.counters) a.counters_start_ns = std::min(a.counters_start_ns, c.t_ns);
  if (t.counters.empty()) return;
  pass.counter_ranks.insert(t.rank);
  if (pass.counter_ranks.size() <= counter_chart_ranks) return;
  const int dropped = *pass.counter_ranks.rbegin();
  pass.counter_ranks.erase(dropped);
  if (dropped == t.rank) {
    std::vector<timing::CounterSample>().swap(t.counters);
  } else {
    std::vector<timing::CounterSample>().swap(a.timelines[pass.timeline_at.at(dropped)].counters);
  }
}

// The rank's own numbers, then its timeline kept without spans and stalls.
void summarise_rank(RankTimeline raw, TrainAnalysis& a, FirstPass& pass) {
  std::vector<std::pair<int64_t, FlowEnd>> receives;  // (step, receive)
  collect_receives(raw, receives);
  RankTimeline t = align_to_reference(std::move(raw));
  a.world_size = std::max({a.world_size, t.world_size, t.rank + 1});
  if (a.settings.empty() && !t.settings.empty()) a.settings = std::move(t.settings);
  if (a.injected_delay.is_null() && !t.injected_delay.is_null()) a.injected_delay = std::move(t.injected_delay);
  // Every rank writes the job's settings (a few KB as a tree): one copy is the job's, the others
  // are freed here rather than kept 16,384 times over to the end.
  t.settings = nlohmann::json::object();
  t.injected_delay = nullptr;
  a.dropped_spans += t.dropped_spans;
  const int64_t uncertainty = t.clock.uncertainty_ns();
  if (uncertainty > a.clock.max_uncertainty_ns) {
    a.clock.max_uncertainty_ns = uncertainty;
    a.clock.worst_rank = t.rank;
  }
  const RankRole role = RankRole::of(t.role);
  const bool model = role.runs_model(), data = role.feeds_batches();
  if (data) pass.data_ranks.insert(t.rank);
  const ModelRankAnalysis* analysed = nullptr;
  if (model) {
    // The window's length from the first model rank's world size, the same for every rank after.
    if (a.model_ranks.empty()) a.steady.max_steps = analysed_steps_for(t.world_size);
    a.model_ranks.push_back(analyze_model_rank(t, pass.steady_waits[t.rank], pass.job, a.whole_run, a.steady.max_steps));
    analysed = &a.model_ranks.back();
  }
  const int64_t kept_from = analysed ? first_kept_step(*analysed) : INT64_MIN;
  for (const auto& [step, receive] : receives) {
    if (step >= kept_from) pass.receives.push_back(receive);
  }
  int64_t last_step = -1;
  for (const Span& s : t.spans) {
    last_step = std::max(last_step, s.step);
    // The data ranks' sends are taken in the second pass, inside the window known then.
    if (s.stage == Stage::batch_wait && s.peer >= 0 && s.step >= kept_from) {
      pass.feed.awaited[s.peer].emplace_back(s.start_ns, s.end_ns);
    }
  }
  pass.last_steps[t.rank] = last_step;
  RankStalls stalls = RankStalls::take(t);
  a.volume.push_back({t.rank, stalls.spans_start, stalls.spans_end, t.spans.size() + t.counters.size()});
  if (analysed && analysed->capped && !data) {
    // Only the intervals near its window: the steady window (every model rank's) starts and ends
    // within a step of this rank's own in a run in lockstep; its longest step is the margin.
    int64_t margin = 0;
    for (const auto& step : analysed->steps) margin = std::max(margin, step.end_ns - step.start_ns);
    stalls.keep_overlapping(analysed->steps.front().start_ns - margin, analysed->steps.back().end_ns + margin);
  }
  if (analysed && !data) {
    // Its own steady steps lie inside the job's steady window (the earliest and latest of every
    // model rank's) and inside its whole life: the stalls there count whole in either.
    const auto steady = std::find_if(analysed->steps.begin(), analysed->steps.end(), [](const StepRecord& s) { return s.steady; });
    if (steady != analysed->steps.end()) stalls.summarise(steady->start_ns, analysed->steps.back().end_ns);
  }
  // A data rank's intervals are taken again in the second pass, inside the window known then.
  if (!data) pass.stalls[t.rank] = std::move(stalls);
  // Freed, not cleared: `t.spans = {}` assigns an empty list and keeps the capacity, which kept
  // every rank's spans allocated to the end (half the report's memory at 4,096 ranks).
  std::vector<Span>().swap(t.spans);
  pass.timeline_at[t.rank] = a.timelines.size();
  keep_chart_counters(t, a, pass);
  a.timelines.push_back(std::move(t));
}

// The model ranks' GPU busy share pooled over those that timed their GPU work, and the least busy.
void pool_gpu_busy(TrainAnalysis& a) {
  double gpu_time = 0, gpu_wall = 0;
  for (const auto& m : a.model_ranks) {
    if (!m.gpu_busy_fraction) continue;
    gpu_time += *m.gpu_busy_fraction * m.steady_seconds;
    gpu_wall += m.steady_seconds;
    if (a.gpu_busy_lowest_rank < 0 || *m.gpu_busy_fraction < a.gpu_busy_lowest_fraction) {
      a.gpu_busy_lowest_rank = m.rank;
      a.gpu_busy_lowest_fraction = *m.gpu_busy_fraction;
    }
  }
  if (gpu_wall > 0) a.gpu_busy_fraction = gpu_time / gpu_wall;
}

// The job's per-step series, and the steps it recorded as steady on any rank.
void pool_job_steps(TrainAnalysis& a, const JobSeries& job) {
  a.job_steps.reserve(job.size());
  for (const auto& [step, sums] : job) {
    JobStep j;
    j.step = step;
    j.seconds = sums.seconds / static_cast<double>(sums.ranks);
    j.start_ns = sums.start_ns;
    j.end_ns = sums.end_ns;
    j.steady_ranks = sums.steady_ranks;
    for (size_t k = 0; k < j.stage_seconds.size() && sums.steady_ranks > 0; ++k) {
      j.stage_seconds[k] = sums.stage_seconds[k] / static_cast<double>(sums.steady_ranks);
    }
    if (sums.steady_ranks > 0) {
      if (a.steady.recorded_first_step < 0) a.steady.recorded_first_step = step;
      a.steady.recorded_last_step = step;
    }
    a.job_steps.push_back(j);
  }
}

// The steady window, the job's series and the model role pooled, from every model rank's steps.
void pool_model_ranks(TrainAnalysis& a, const JobSeries& job) {
  a.steady.enough = !a.model_ranks.empty();
  a.steady.steady_steps = a.model_ranks.empty() ? 0 : SIZE_MAX;
  a.steady.start_ns = INT64_MAX;
  a.steady.end_ns = INT64_MIN;
  std::vector<const StepRecord*> role_steps;
  double total = 0, wait = 0, exposed = 0;
  for (const auto& m : a.model_ranks) {
    a.steady.steady_steps = std::min(a.steady.steady_steps, m.steady_steps);
    a.steady.warmup_steps = std::max(a.steady.warmup_steps, m.warmup_steps);
    a.steady.capped = a.steady.capped || m.capped;
    a.steady.left_out_steps = std::max(a.steady.left_out_steps, m.left_out_steps);
    if (m.steady_steps < min_steady_steps) a.steady.enough = false;
    for (const auto& s : m.steps) {
      if (!s.steady) continue;
      role_steps.push_back(&s);
      a.steady.start_ns = std::min(a.steady.start_ns, s.start_ns);
      a.steady.end_ns = std::max(a.steady.end_ns, s.end_ns);
      if (a.steady.first_step < 0 || s.step < a.steady.first_step) a.steady.first_step = s.step;
      a.steady.last_step = std::max(a.steady.last_step, s.step);
    }
    total += m.steady_seconds;
    wait += m.stages.at(Stage::batch_wait).per_step.total;
    exposed += m.stages.at(Stage::allreduce_exposed).per_step.total;
  }
  if (role_steps.empty()) a.steady.start_ns = a.steady.end_ns = 0;
  std::vector<double> role_times;
  for (const StepRecord* s : role_steps) role_times.push_back(s->seconds);
  a.role_step_seconds = Distribution::of(role_times);
  a.role_stages = breakdown(role_steps);
  a.input_wait_fraction = total > 0 ? wait / total : 0;
  a.allreduce_exposed_fraction = total > 0 ? exposed / total : 0;
  pool_gpu_busy(a);
  pool_job_steps(a, job);
}

// Each model rank's transfer exposure, and the role's, once the data ranks' sends are in.
void pool_transfer(TrainAnalysis& a, FirstPass& pass) {
  double total = 0, transfer = 0;
  for (auto& m : a.model_ranks) {
    m.transfer_exposed_fraction = transfer_exposed(m, pass.steady_waits[m.rank], pass.feed);
    total += m.steady_seconds;
    transfer += m.transfer_exposed_fraction * m.steady_seconds;
  }
  pass.steady_waits.clear();
  a.transfer_exposed_fraction = total > 0 ? transfer / total : 0;
}

const auto rank_order = [](const auto& x, const auto& y) { return x.rank < y.rank; };

}  // namespace

TimelineSource timelines_in(const std::vector<RankTimeline>& timelines) {
  return [&timelines](const std::function<bool(int)>& wanted, const TimelineVisitor& visit) {
    for (const auto& t : timelines) {
      if (wanted(t.rank)) visit(t);
    }
  };
}

TrainAnalysis analyze_train(const std::vector<RankTimeline>& timelines) {
  return analyze_train(timelines_in(timelines));
}

TrainAnalysis analyze_train(const TimelineSource& source) {
  TrainAnalysis a;
  FirstPass pass;
  source([](int) { return true; }, [&](RankTimeline raw) { summarise_rank(std::move(raw), a, pass); });
  std::sort(a.timelines.begin(), a.timelines.end(), rank_order);
  std::sort(a.model_ranks.begin(), a.model_ranks.end(), rank_order);
  std::sort(a.volume.begin(), a.volume.end(), rank_order);
  pass.timeline_at.clear();
  merge_all(pass.feed.awaited);
  pool_model_ranks(a, pass.job);
  pass.job.clear();
  // The second pass: the data ranks, against the steady window every model rank gave. Their sends
  // and stall intervals are kept only inside it (and the sends only those a kept receive names).
  const std::set<int> data_ranks = std::move(pass.data_ranks);
  std::sort(pass.receives.begin(), pass.receives.end());
  pass.receives.shrink_to_fit();  // up to half of it was the vector's growth: freed before the second pass
  source([&](int rank) { return data_ranks.count(rank) > 0; }, [&](RankTimeline raw) {
    if (!data_ranks.count(raw.rank)) return;
    check_causality(collect_sends(raw, pass.receives), pass.receives, a.clock.causality);
    RankTimeline t = align_to_reference(std::move(raw));
    for (const Span& s : t.spans) {
      // Only a send overlapping the window can overlap a steady batch wait (transfer_exposed).
      if (s.stage == Stage::send && s.end_ns >= a.steady.start_ns && s.start_ns <= a.steady.end_ns) {
        pass.feed.sending[t.rank].emplace_back(s.start_ns, s.end_ns);
      }
    }
    a.data_ranks.push_back(analyze_data_rank(t, a.steady.start_ns, a.steady.end_ns, pass.feed));
    RankStalls stalls = RankStalls::take(t);
    if (a.steady.enough) {
      stalls.keep_overlapping(a.steady.start_ns, a.steady.end_ns);
      stalls.summarise(a.steady.start_ns, a.steady.end_ns);
    }
    pass.stalls[t.rank] = std::move(stalls);
  });
  std::sort(a.data_ranks.begin(), a.data_ranks.end(), rank_order);
  merge_all(pass.feed.sending);
  pool_transfer(a, pass);
  std::vector<FlowEnd>().swap(pass.receives);
  a.hang = hang_facts(a.timelines, a.world_size, pass.last_steps);
  for (const auto& t : a.timelines) {
    const RankStalls& stalls = pass.stalls[t.rank];
    a.cpu.push_back(a.steady.enough ? analyze_rank_cpu(t, stalls, a.steady.start_ns, a.steady.end_ns)
                                    : analyze_rank_cpu(t, stalls, 0, 0));
  }
  judge_descheduled(a.cpu);
  return a;
}

}  // namespace sluice::report
