#include "timing/timeline_file.h"

#include <algorithm>

#include "common/error.h"
#include "common/file_util.h"

namespace sluice::timing {

namespace fs = std::filesystem;
using nlohmann::json;

void RankTimeline::take(SpanRecorder::Snapshot snapshot) {
  lanes = std::move(snapshot.lanes);
  spans = std::move(snapshot.spans);
  counter_names = std::move(snapshot.counter_names);
  counters = std::move(snapshot.counters);
  dropped_spans = snapshot.dropped_spans;
}

json RankTimeline::to_json() const {
  json stage_names = json::array();
  for (int i = 0; i < stage_count; ++i) stage_names.push_back(to_string(static_cast<Stage>(i)));
  json span_rows = json::array();
  for (const Span& s : spans) {
    span_rows.push_back({s.lane, static_cast<int>(s.stage), s.start_ns, s.end_ns, s.step, s.bytes, s.peer,
                         s.sequence});
  }
  json counter_rows = json::array();
  for (const CounterSample& c : counters) counter_rows.push_back({c.counter, c.lane, c.t_ns, c.value});
  return {{"format", timeline_format},
          {"job", job},
          {"rank", rank},
          {"world_size", world_size},
          {"host", host},
          {"gpu", gpu},
          {"role", role},
          {"feeds", feeds},
          {"fed_by", fed_by},
          {"status", status},
          {"error", error},
          {"waiting_for", waiting_for},
          {"clock", clock.to_json()},
          {"lanes", lanes},
          {"stages", stage_names},
          {"spans", span_rows},
          {"counter_names", counter_names},
          {"counters", counter_rows},
          {"dropped_spans", dropped_spans},
          {"channels", channels},
          {"injected_delay", injected_delay},
          {"settings", settings},
          {"summary", summary},
          {"resources", resources}};
}

RankTimeline RankTimeline::from_json(const json& j, const std::string& source) {
  try {
    if (j.value("format", "") != timeline_format) {
      throw DataError(source + ": not a sluice timeline (format '" + j.value("format", "") + "', expected '" +
                      timeline_format + "'); was it written by another sluice version?");
    }
    RankTimeline t;
    t.job = j.at("job").get<std::string>();
    t.rank = j.at("rank").get<int>();
    t.world_size = j.at("world_size").get<int>();
    t.host = j.at("host").get<std::string>();
    t.gpu = j.value("gpu", -1);
    t.role = j.at("role").get<std::string>();
    t.feeds = j.value("feeds", std::vector<int>{});
    t.fed_by = j.value("fed_by", -1);
    t.status = j.value("status", "finished");
    t.error = j.value("error", "");
    t.waiting_for = j.value("waiting_for", -1);
    t.clock = ClockAlignment::from_json(j.at("clock"));
    t.lanes = j.at("lanes").get<std::vector<std::string>>();
    // Stage columns are indices into the file's own list: map them by name onto this build's.
    std::vector<Stage> stage_of;
    for (const auto& name : j.at("stages")) {
      const auto stage = stage_from_string(name.get<std::string>());
      if (!stage) throw DataError(source + ": unknown stage '" + name.get<std::string>() + "'");
      stage_of.push_back(*stage);
    }
    for (const auto& row : j.at("spans")) {
      Span s;
      s.lane = row.at(0).get<uint16_t>();
      s.stage = stage_of.at(row.at(1).get<size_t>());
      s.start_ns = row.at(2).get<int64_t>();
      s.end_ns = row.at(3).get<int64_t>();
      s.step = row.at(4).get<int64_t>();
      s.bytes = row.at(5).get<int64_t>();
      s.peer = row.at(6).get<int32_t>();
      s.sequence = row.at(7).get<int64_t>();
      t.spans.push_back(s);
    }
    t.counter_names = j.value("counter_names", std::vector<std::string>{});
    for (const auto& row : j.value("counters", json::array())) {
      t.counters.push_back({row.at(2).get<int64_t>(), row.at(3).get<double>(), row.at(0).get<uint16_t>(),
                            row.at(1).get<uint16_t>()});
    }
    t.dropped_spans = j.value("dropped_spans", uint64_t{0});
    t.channels = j.value("channels", json::array());
    t.injected_delay = j.value("injected_delay", json());
    t.settings = j.value("settings", json::object());
    t.summary = j.value("summary", json::object());
    t.resources = j.value("resources", json());
    return t;
  } catch (const json::exception& error) {
    throw DataError(source + ": malformed timeline: " + error.what());
  } catch (const std::out_of_range& error) {
    throw DataError(source + ": malformed timeline (a span names a stage index not in its list): " +
                    error.what());
  }
}

fs::path timeline_path(const fs::path& run_dir, int rank) {
  return run_dir / "timeline" / ("rank-" + std::to_string(rank) + ".json");
}

void write_timeline(const fs::path& run_dir, const RankTimeline& timeline) {
  fs::create_directories(run_dir / "timeline");
  write_file_atomically(timeline_path(run_dir, timeline.rank), timeline.to_json().dump() + "\n");
}

std::map<int, fs::path> timeline_files(const fs::path& run_dir) {
  std::map<int, fs::path> files;
  const fs::path dir = run_dir / "timeline";
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    const std::string number = name.substr(5, name.size() - 5 - 5);
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) continue;
    files[std::stoi(number)] = entry.path();
  }
  return files;
}

RankTimeline read_timeline(const fs::path& file) {
  json j;
  try {
    j = json::parse(read_file(file));
  } catch (const json::exception& error) {
    throw DataError(file.string() + ": not valid JSON (" + error.what() +
                    "); the rank may have died while writing it: delete it and rerun `sluice report`");
  }
  return RankTimeline::from_json(j, file.string());
}

std::vector<RankTimeline> read_timelines(const fs::path& run_dir) {
  std::vector<RankTimeline> timelines;
  for (const auto& [rank, file] : timeline_files(run_dir)) timelines.push_back(read_timeline(file));
  std::sort(timelines.begin(), timelines.end(),
            [](const RankTimeline& a, const RankTimeline& b) { return a.rank < b.rank; });
  return timelines;
}

}  // namespace sluice::timing
