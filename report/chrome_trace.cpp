#include "report/chrome_trace.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <spdlog/fmt/fmt.h>

#include "common/error.h"

#include "report/run_analysis.h"

namespace sluice::report {
namespace {

using nlohmann::json;
using timing::Span;

}  // namespace

int64_t flow_id(int source, int destination, int64_t sequence, int world_size) {
  const int64_t pair = static_cast<int64_t>(source) * std::max(1, world_size) + destination;
  return (pair << 28) | (sequence & ((int64_t{1} << 28) - 1));
}

TraceSelection whole_trace(const std::vector<timing::RankTimeline>& aligned) {
  TraceSelection selection;
  selection.limits.max_ranks = aligned.size();
  int64_t origin = INT64_MAX;
  for (const auto& t : aligned) {
    selection.ranks.push_back(t.rank);
    selection.world_size = std::max({selection.world_size, t.world_size, t.rank + 1});
    selection.planned_events += t.spans.size() + t.counters.size();
    for (const Span& s : t.spans) origin = std::min(origin, s.start_ns);
  }
  std::sort(selection.ranks.begin(), selection.ranks.end());
  selection.limits.max_events = std::max(selection.limits.max_events, selection.planned_events);
  selection.origin_ns = origin == INT64_MAX ? 0 : origin;
  return selection;
}

namespace {

// The selected ranks: rank 0, the named ones (and the data ranks feeding named model ranks),
// then ranks evenly spaced over the rest.
void choose_ranks(const TrainAnalysis& a, const std::vector<int>& verdict_ranks, TraceSelection& selection) {
  std::set<int> present;
  for (const auto& v : a.volume) present.insert(v.rank);
  std::set<int> chosen;
  if (present.size() <= selection.limits.max_ranks) {
    chosen = present;
  } else {
    std::set<int> named;
    for (int r : verdict_ranks) {
      if (present.count(r)) named.insert(r);
    }
    for (const auto& m : a.model_ranks) {
      if (named.count(m.rank) && present.count(m.fed_by)) named.insert(m.fed_by);
    }
    selection.named_ranks.assign(named.begin(), named.end());
    chosen = named;
    if (present.count(0)) chosen.insert(0);
    std::vector<int> rest;
    for (int r : present) {
      if (!chosen.count(r)) rest.push_back(r);
    }
    const size_t room = selection.limits.max_ranks > chosen.size() ? selection.limits.max_ranks - chosen.size() : 0;
    for (size_t i = 0; i < room && i < rest.size(); ++i) chosen.insert(rest[i * rest.size() / room]);
  }
  selection.ranks.assign(chosen.begin(), chosen.end());
  selection.ranks_left_out = present.size() - chosen.size();
}

// A window of consecutive steps in the middle of the (analysed) steady window, as many as the
// event budget holds at the selected ranks' mean events per step (over every step of the run: the
// events counted are the whole timelines').
void choose_window(const TrainAnalysis& a, TraceSelection& selection) {
  const std::vector<JobStep>& job = a.job_steps;
  const size_t steps = job.size();
  if (selection.planned_events <= selection.limits.max_events || steps == 0) return;
  const double per_step = static_cast<double>(selection.planned_events) / static_cast<double>(steps);
  const size_t fit = std::clamp<size_t>(static_cast<size_t>(static_cast<double>(selection.limits.max_events) / per_step), 1, steps);
  size_t first = 0, last = steps;  // [first, last): the steady steps' indices, or all
  for (size_t i = 0; i < steps; ++i) {
    if (job[i].step == a.steady.first_step) first = i;
    if (job[i].step == a.steady.last_step) last = i + 1;
  }
  if (last <= first) first = 0, last = steps;
  const size_t middle = (first + last) / 2;
  const size_t begin = std::min(middle > fit / 2 ? middle - fit / 2 : 0, steps - fit);
  selection.window = true;
  selection.first_step = job[begin].step;
  selection.last_step = job[begin + fit - 1].step;
  selection.start_ns = INT64_MAX;
  selection.end_ns = INT64_MIN;
  for (size_t i = begin; i < begin + fit; ++i) {
    selection.start_ns = std::min(selection.start_ns, job[i].start_ns);
    selection.end_ns = std::max(selection.end_ns, job[i].end_ns);
  }
  if (selection.start_ns > selection.end_ns) selection.start_ns = INT64_MIN, selection.end_ns = INT64_MAX;
  selection.planned_events = static_cast<size_t>(per_step * static_cast<double>(fit));
}

}  // namespace

TraceSelection choose_trace(const TrainAnalysis& a, const std::vector<int>& verdict_ranks, const TraceLimits& limits) {
  TraceSelection selection;
  selection.limits = limits;
  selection.world_size = a.world_size;
  choose_ranks(a, verdict_ranks, selection);
  int64_t origin = INT64_MAX;
  for (const auto& v : a.volume) {
    if (!std::binary_search(selection.ranks.begin(), selection.ranks.end(), v.rank)) continue;
    selection.planned_events += v.events;
    origin = std::min(origin, v.start_ns);
  }
  choose_window(a, selection);
  selection.origin_ns = selection.window ? selection.start_ns : (origin == INT64_MAX ? 0 : origin);
  return selection;
}

json TraceSelection::to_json() const {
  return {{"ranks", ranks},
          {"named_ranks", named_ranks},
          {"ranks_left_out", ranks_left_out},
          {"window", window},
          {"first_step", first_step},
          {"last_step", last_step},
          {"events_planned", planned_events},
          {"max_events", limits.max_events},
          {"max_ranks", limits.max_ranks},
          {"full_data", "timeline/rank-N.json (every span of every rank)"}};
}

std::string TraceSelection::describe() const {
  if (ranks_left_out == 0 && !window) return "trace.json holds every rank and every step.";
  std::string text = "trace.json holds " + std::to_string(ranks.size()) + " of " +
                     std::to_string(ranks.size() + ranks_left_out) + " ranks";
  if (ranks_left_out > 0) text += " (rank 0, the ranks the verdicts name, and an even sample of the others)";
  text += window ? ", steps " + std::to_string(first_step) + " to " + std::to_string(last_step) + " only"
                 : ", every step";
  return text + ", to stay under " + std::to_string(limits.max_events) +
         " events; the full data is in timeline/rank-N.json.";
}

namespace {

// Writes the events of one trace as they come, separated by commas.
class TraceWriter {
 public:
  explicit TraceWriter(const std::filesystem::path& file) : file_(file), out_(file) {
    if (!out_) throw DataError(file.string() + ": cannot write the trace (is the run directory writable?)");
    out_ << "{\"traceEvents\":[\n";
  }
  void event(const std::string& text) {
    out_ << (first_ ? "" : ",\n") << text;
    first_ = false;
  }
  void finish(const json& other_data) {
    out_ << "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" << other_data.dump() << "}\n";
    out_.close();
    if (!out_) throw DataError(file_.string() + ": writing the trace failed (disk full?)");
  }

 private:
  std::filesystem::path file_;
  std::ofstream out_;
  bool first_ = true;
};

struct FlowSend {
  double ts = 0;
  uint16_t lane = 0;
  int64_t bytes = 0;
};

struct FlowWait {
  int rank = 0, peer = 0;
  uint16_t lane = 0;
  int64_t sequence = 0, step = 0;
  double start = 0, end = 0;
};

}  // namespace

void write_chrome_trace(const std::filesystem::path& file, const TimelineSource& source,
                        const TraceSelection& selection) {
  const std::filesystem::path partial = file.string() + ".partial";
  TraceWriter out(partial);
  const auto us = [&](int64_t ns) { return static_cast<double>(ns - selection.origin_ns) / 1000.0; };
  const auto inside = [&](int64_t ns) { return ns >= selection.start_ns && ns < selection.end_ns; };
  std::map<std::tuple<int, int, int64_t>, FlowSend> sends;
  std::vector<FlowWait> waits;
  const auto wanted = [&](int rank) { return std::binary_search(selection.ranks.begin(), selection.ranks.end(), rank); };
  source(wanted, [&](RankTimeline raw) {
    const RankTimeline t = align_to_reference(std::move(raw));
    out.event(json({{"name", "process_name"}, {"ph", "M"}, {"pid", t.rank}, {"tid", 0},
                    {"args", {{"name", describe_rank(t)}}}}).dump());
    out.event(json({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", t.rank}, {"tid", 0},
                    {"args", {{"sort_index", t.rank}}}}).dump());
    for (size_t lane = 0; lane < t.lanes.size(); ++lane) {
      out.event(json({{"name", "thread_name"}, {"ph", "M"}, {"pid", t.rank}, {"tid", lane},
                      {"args", {{"name", t.lanes[lane]}}}}).dump());
    }
    const std::string role = json(t.role).dump();
    for (const Span& s : t.spans) {
      if (!inside(s.start_ns)) continue;
      out.event(fmt::format("{{\"name\":\"{}\",\"cat\":{},\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},"
                            "\"args\":{{\"step\":{},\"bytes\":{},\"peer\":{},\"sequence\":{}}}}}",
                            timing::to_string(s.stage), role, t.rank, s.lane, us(s.start_ns),
                            static_cast<double>(std::max<int64_t>(0, s.end_ns - s.start_ns)) / 1000.0, s.step, s.bytes,
                            s.peer, s.sequence));
      if (s.stage == timing::Stage::send && s.sequence >= 0) sends[{t.rank, s.peer, s.sequence}] = {us(s.start_ns), s.lane, s.bytes};
      if (s.stage == timing::Stage::batch_wait && s.sequence >= 0) {
        waits.push_back({t.rank, s.peer, s.lane, s.sequence, s.step, us(s.start_ns), us(s.end_ns)});
      }
    }
    for (const auto& c : t.counters) {
      if (!inside(c.t_ns)) continue;
      const std::string name = json(c.counter < t.counter_names.size() ? t.counter_names[c.counter] : "counter").dump();
      out.event(fmt::format("{{\"name\":{},\"ph\":\"C\",\"pid\":{},\"ts\":{},\"args\":{{{}:{}}}}}", name, t.rank,
                            us(c.t_ns), name, c.value));
    }
  });
  // Flows: each batch from its send (data rank) to the batch_wait that received it (model rank).
  for (const FlowWait& w : waits) {
    const auto send = sends.find({w.peer, w.rank, w.sequence});
    if (send == sends.end()) continue;
    const int64_t id = flow_id(w.peer, w.rank, w.sequence, selection.world_size);
    const json args = {{"sequence", w.sequence}, {"step", w.step}, {"bytes", send->second.bytes}};
    out.event(json({{"name", "batch"}, {"cat", "feed"}, {"ph", "s"}, {"id", id}, {"pid", w.peer},
                    {"tid", send->second.lane}, {"ts", send->second.ts}, {"args", args}}).dump());
    // Inside the receiving slice, so that the "e" binding point attaches to it.
    const double at = std::max(w.start, w.end - std::min(1.0, (w.end - w.start) / 2));
    out.event(json({{"name", "batch"}, {"cat", "feed"}, {"ph", "f"}, {"bp", "e"}, {"id", id}, {"pid", w.rank},
                    {"tid", w.lane}, {"ts", at}, {"args", args}}).dump());
  }
  out.finish({{"generator", "sluice report"},
              {"clock", "rank 0, microseconds from the earliest span kept"},
              {"selection", selection.to_json()}});
  std::filesystem::rename(partial, file);
}

}  // namespace sluice::report
