#include "timing/timeline_file.h"

#include <algorithm>

#include <simdjson.h>

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

void RankTimeline::set_resources(json r) {
  stalls.clear();
  storage_reads.clear();
  if (r.is_object()) {
    if (const auto it = r.find("stalls"); it != r.end()) {
      stalls = it->get<std::vector<std::pair<int64_t, int64_t>>>();
      r.erase(it);
    }
    if (const auto reads = r.find("storage_reads"); reads != r.end() && reads->is_object()) {
      if (const auto it = reads->find("intervals"); it != reads->end()) {
        storage_reads = it->get<std::vector<std::array<int64_t, 4>>>();
        reads->erase(it);
      }
    }
  }
  resources = std::move(r);
}

namespace {

// `resources` with stalls and storage_reads back in place, as CpuWatch::to_json() wrote them. A
// list still inside `resources` (assigned directly rather than through set_resources) is written
// as it is, unless the vector has intervals too.
json resources_json(const RankTimeline& t) {
  json r = t.resources;
  if (!r.is_object()) return r;
  if (!t.stalls.empty() || !r.contains("stalls")) r["stalls"] = t.stalls;
  if (const auto reads = r.find("storage_reads"); reads != r.end() && reads->is_object()) {
    if (!t.storage_reads.empty() || !reads->contains("intervals")) (*reads)["intervals"] = t.storage_reads;
  }
  return r;
}

}  // namespace

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
          {"resources", resources_json(*this)}};
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
    t.set_resources(j.value("resources", json()));
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

namespace {

// THE FAST READER. `sluice report` reads every rank's file (thousands at scale), and most of a
// file is its span rows. nlohmann's DOM costs ~20 ms for a 140 KB file (a node per number, then
// copied into Spans); simdjson's on-demand parser reads the rows straight into Spans, and only the
// small free-form members (clock, channels, settings, summary, resources, injected_delay) go
// through nlohmann, from their raw text, so they compare and print exactly as before.
namespace sj = simdjson::ondemand;

// A member's value as its own nlohmann::json (object and array members by their raw text).
json to_nlohmann(sj::value value) {
  switch (value.type().value()) {
    case sj::json_type::object:
      return json::parse(value.get_object().value().raw_json().value());
    case sj::json_type::array:
      return json::parse(value.get_array().value().raw_json().value());
    default:
      return json::parse(value.raw_json_token());
  }
}

std::vector<std::string> strings_of(sj::value value) {
  std::vector<std::string> out;
  for (auto item : value.get_array()) out.emplace_back(item.get_string().value());
  return out;
}

// The next integer of a row (an array); throws INDEX_OUT_OF_BOUNDS when the row is too short.
int64_t next_int(sj::array_iterator& it, const sj::array_iterator& end) {
  if (it == end) throw simdjson::simdjson_error(simdjson::INDEX_OUT_OF_BOUNDS);
  const int64_t value = (*it).get_int64().value();
  ++it;
  return value;
}

// spans: [[lane, stage, start_ns, end_ns, step, bytes, peer, sequence], ...]; `stage_index` gets
// each row's stage column (the file's `stages` may come after its spans).
void read_span_rows(sj::value value, std::vector<Span>& spans, std::vector<size_t>& stage_index) {
  sj::array rows = value.get_array().value();
  // Counting first (a walk of the structural index, no number parsed) saves the vector's regrowths.
  const size_t count = rows.count_elements().value();
  spans.reserve(spans.size() + count);
  stage_index.reserve(stage_index.size() + count);
  for (auto item : rows) {
    sj::array row = item.get_array().value();
    auto it = row.begin().value();
    const auto end = row.end().value();
    Span s;
    s.lane = static_cast<uint16_t>(next_int(it, end));
    stage_index.push_back(static_cast<size_t>(next_int(it, end)));
    s.start_ns = next_int(it, end);
    s.end_ns = next_int(it, end);
    s.step = next_int(it, end);
    s.bytes = next_int(it, end);
    s.peer = static_cast<int32_t>(next_int(it, end));
    s.sequence = next_int(it, end);
    spans.push_back(s);
  }
}

// counters: [[counter, lane, t_ns, value], ...]
void read_counter_rows(sj::value value, std::vector<CounterSample>& counters) {
  for (auto item : value.get_array()) {
    sj::array row = item.get_array().value();
    auto it = row.begin().value();
    const auto end = row.end().value();
    CounterSample c;
    c.counter = static_cast<uint16_t>(next_int(it, end));
    c.lane = static_cast<uint16_t>(next_int(it, end));
    c.t_ns = next_int(it, end);
    if (it == end) throw simdjson::simdjson_error(simdjson::INDEX_OUT_OF_BOUNDS);
    c.value = (*it).get_double().value();
    counters.push_back(c);
  }
}

// Rows of N integers ([[a, b, ...], ...]) appended to `out` through `make` (a longer row's other
// numbers are ignored, as the DOM reader did). Reserved to the exact count first: the report keeps
// these vectors for every rank, and a doubled capacity is up to twice the memory.
template <size_t N, class Row, class Make>
void read_int_rows(sj::value value, std::vector<Row>& out, Make&& make) {
  sj::array rows = value.get_array().value();
  out.reserve(out.size() + rows.count_elements().value());
  std::array<int64_t, N> numbers{};
  for (auto item : rows) {
    sj::array row = item.get_array().value();
    auto it = row.begin().value();
    const auto end = row.end().value();
    for (auto& n : numbers) n = next_int(it, end);
    out.push_back(make(numbers));
  }
}

// resources (CpuWatch::to_json()): its two long lists, the stall intervals and the storage-read
// intervals (thousands of rows on a loaded machine: most of the file then), straight into the
// timeline's vectors; every other member through nlohmann, as before.
json read_resources(sj::value value, RankTimeline& t) {
  if (value.type().value() != sj::json_type::object) return to_nlohmann(value);
  json resources = json::object();
  for (auto field : value.get_object()) {
    std::string key(field.unescaped_key().value());
    sj::value member = field.value().value();
    if (key == "stalls") {
      t.stalls.clear();
      read_int_rows<2>(member, t.stalls, [](const std::array<int64_t, 2>& n) { return std::make_pair(n[0], n[1]); });
    } else if (key == "storage_reads" && member.type().value() == sj::json_type::object) {
      json reads = json::object();
      for (auto read_field : member.get_object()) {
        std::string read_key(read_field.unescaped_key().value());
        if (read_key == "intervals") {
          t.storage_reads.clear();
          read_int_rows<4>(read_field.value().value(), t.storage_reads, [](const std::array<int64_t, 4>& n) { return n; });
        } else {
          reads[read_key] = to_nlohmann(read_field.value().value());
        }
      }
      resources[key] = std::move(reads);
    } else {
      resources[key] = to_nlohmann(member);
    }
  }
  return resources;
}

// What a file's members set besides the timeline's own fields: the format, the raw stage column
// of every span, the stage names, and which required members were there.
struct ReadState {
  std::string format;
  std::vector<size_t> stage_index;
  std::vector<std::string> stages;
  std::vector<std::string> seen;
};

void read_member(std::string_view key, sj::value value, RankTimeline& t, ReadState& state) {
  const auto text = [&] { return std::string(value.get_string().value()); };
  const auto integer = [&] { return value.get_int64().value(); };
  if (key == "format") state.format = text();
  else if (key == "job") t.job = text();
  else if (key == "rank") t.rank = static_cast<int>(integer());
  else if (key == "world_size") t.world_size = static_cast<int>(integer());
  else if (key == "host") t.host = text();
  else if (key == "gpu") t.gpu = static_cast<int>(integer());
  else if (key == "role") t.role = text();
  else if (key == "feeds") for (auto r : value.get_array()) t.feeds.push_back(static_cast<int>(r.get_int64().value()));
  else if (key == "fed_by") t.fed_by = static_cast<int>(integer());
  else if (key == "status") t.status = text();
  else if (key == "error") t.error = text();
  else if (key == "waiting_for") t.waiting_for = static_cast<int>(integer());
  else if (key == "clock") t.clock = ClockAlignment::from_json(to_nlohmann(value));
  else if (key == "lanes") t.lanes = strings_of(value);
  else if (key == "stages") state.stages = strings_of(value);
  else if (key == "spans") read_span_rows(value, t.spans, state.stage_index);
  else if (key == "counter_names") t.counter_names = strings_of(value);
  else if (key == "counters") read_counter_rows(value, t.counters);
  else if (key == "dropped_spans") t.dropped_spans = value.get_uint64().value();
  else if (key == "channels") t.channels = to_nlohmann(value);
  else if (key == "injected_delay") t.injected_delay = to_nlohmann(value);
  else if (key == "settings") t.settings = to_nlohmann(value);
  else if (key == "summary") t.summary = to_nlohmann(value);
  else if (key == "resources") t.resources = read_resources(value, t);
  else return;  // a member a later version added: not ours to judge
  state.seen.emplace_back(key);
}

// The stage columns mapped by name onto this build's stages; the required members checked.
void finish_read(RankTimeline& t, ReadState& state, const std::string& source) {
  if (state.format != timeline_format) {
    throw DataError(source + ": not a sluice timeline (format '" + state.format + "', expected '" + timeline_format +
                    "'); was it written by another sluice version?");
  }
  for (const char* required : {"job", "rank", "world_size", "host", "role", "clock", "lanes", "stages", "spans"}) {
    if (std::find(state.seen.begin(), state.seen.end(), required) == state.seen.end()) {
      throw DataError(source + ": malformed timeline: no '" + required + "' member");
    }
  }
  std::vector<Stage> stage_of;
  for (const auto& name : state.stages) {
    const auto stage = stage_from_string(name);
    if (!stage) throw DataError(source + ": unknown stage '" + name + "'");
    stage_of.push_back(*stage);
  }
  for (size_t i = 0; i < t.spans.size(); ++i) {
    if (state.stage_index[i] >= stage_of.size()) {
      throw DataError(source + ": malformed timeline: span " + std::to_string(i) + " names stage index " +
                      std::to_string(state.stage_index[i]) + ", but the file lists " +
                      std::to_string(stage_of.size()) + " stages");
    }
    t.spans[i].stage = stage_of[state.stage_index[i]];
  }
}

}  // namespace

RankTimeline read_timeline(const fs::path& file) {
  auto loaded = simdjson::padded_string::load(file.string());
  if (loaded.error()) {
    read_file(file);  // throws the error that names the file and errno
    throw DataError(file.string() + ": could not be read (" + simdjson::error_message(loaded.error()) + ")");
  }
  const simdjson::padded_string text = std::move(loaded).value();
  // One parser per thread, its buffers reused from file to file.
  thread_local sj::parser parser;
  RankTimeline t;
  ReadState state;
  std::string member;  // the one being read, for the error: a file of the wrong schema names its field
  try {
    sj::document doc = parser.iterate(text).value();
    for (auto field : doc.get_object()) {
      member = std::string(field.unescaped_key().value());
      read_member(member, field.value().value(), t, state);
    }
  } catch (const simdjson::simdjson_error& error) {
    const bool wrong_shape = error.error() == simdjson::INCORRECT_TYPE || error.error() == simdjson::NUMBER_OUT_OF_RANGE ||
                             error.error() == simdjson::INDEX_OUT_OF_BOUNDS;
    if (wrong_shape) {
      throw DataError(file.string() + ": malformed timeline: its member '" + member +
                      "' is not what this version writes there (" + error.what() + ")");
    }
    throw DataError(file.string() + ": not valid JSON (" + error.what() +
                    "); the rank may have died while writing it: delete it and rerun `sluice report`");
  } catch (const json::exception& error) {
    throw DataError(file.string() + ": malformed timeline: " + error.what());
  }
  finish_read(t, state, file.string());
  return t;
}

std::vector<RankTimeline> read_timelines(const fs::path& run_dir) {
  std::vector<RankTimeline> timelines;
  for (const auto& [rank, file] : timeline_files(run_dir)) timelines.push_back(read_timeline(file));
  std::sort(timelines.begin(), timelines.end(),
            [](const RankTimeline& a, const RankTimeline& b) { return a.rank < b.rank; });
  return timelines;
}

}  // namespace sluice::timing
