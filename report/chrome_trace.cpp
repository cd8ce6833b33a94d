#include "report/chrome_trace.h"

#include <algorithm>
#include <map>
#include <tuple>

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

json chrome_trace(const std::vector<timing::RankTimeline>& aligned) {
  int64_t origin = INT64_MAX;
  int world = 0;
  for (const auto& t : aligned) {
    world = std::max({world, t.world_size, t.rank + 1});
    for (const Span& s : t.spans) origin = std::min(origin, s.start_ns);
  }
  if (origin == INT64_MAX) origin = 0;
  const auto us = [origin](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };

  json events = json::array();
  std::map<std::tuple<int, int, int64_t>, const Span*> sends;
  for (const auto& t : aligned) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", t.rank}, {"tid", 0},
                      {"args", {{"name", describe_rank(t)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", t.rank}, {"tid", 0},
                      {"args", {{"sort_index", t.rank}}}});
    for (size_t lane = 0; lane < t.lanes.size(); ++lane) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", t.rank}, {"tid", lane},
                        {"args", {{"name", t.lanes[lane]}}}});
    }
    for (const Span& s : t.spans) {
      events.push_back({{"name", timing::to_string(s.stage)},
                        {"cat", t.role},
                        {"ph", "X"},
                        {"pid", t.rank},
                        {"tid", s.lane},
                        {"ts", us(s.start_ns)},
                        {"dur", static_cast<double>(std::max<int64_t>(0, s.end_ns - s.start_ns)) / 1000.0},
                        {"args", {{"step", s.step}, {"bytes", s.bytes}, {"peer", s.peer}, {"sequence", s.sequence}}}});
      if (s.stage == timing::Stage::send && s.sequence >= 0) sends[{t.rank, s.peer, s.sequence}] = &s;
    }
    for (const auto& c : t.counters) {
      const std::string name = c.counter < t.counter_names.size() ? t.counter_names[c.counter] : "counter";
      events.push_back({{"name", name}, {"ph", "C"}, {"pid", t.rank}, {"ts", us(c.t_ns)}, {"args", {{name, c.value}}}});
    }
  }
  // Flows: each batch from its send (data rank) to the batch_wait that received it (model rank).
  for (const auto& t : aligned) {
    for (const Span& s : t.spans) {
      if (s.stage != timing::Stage::batch_wait || s.sequence < 0) continue;
      const auto send = sends.find({s.peer, t.rank, s.sequence});
      if (send == sends.end()) continue;
      const Span& from = *send->second;
      const int64_t id = flow_id(s.peer, t.rank, s.sequence, world);
      const json args = {{"sequence", s.sequence}, {"step", s.step}, {"bytes", from.bytes}};
      events.push_back({{"name", "batch"}, {"cat", "feed"}, {"ph", "s"}, {"id", id}, {"pid", s.peer},
                        {"tid", from.lane}, {"ts", us(from.start_ns)}, {"args", args}});
      // Inside the receiving slice, so that the "e" binding point attaches to it.
      const double end = us(s.end_ns), start = us(s.start_ns);
      const double at = std::max(start, end - std::min(1.0, (end - start) / 2));
      events.push_back({{"name", "batch"}, {"cat", "feed"}, {"ph", "f"}, {"bp", "e"}, {"id", id}, {"pid", t.rank},
                        {"tid", s.lane}, {"ts", at}, {"args", args}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"generator", "sluice report"}, {"clock", "rank 0, microseconds from the earliest span"}}}};
}

}  // namespace sluice::report
