#include "bench/measure/bench_sweep.h"

#include <sys/wait.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace sluice::benchmark {

namespace fs = std::filesystem;
using nlohmann::json;

SweepAxis parse_sweep(const std::string& spec) {
  const size_t equals = spec.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw ConfigError("--sweep '" + spec + "': write KEY=V1,V2,... e.g. --sweep train.batch_size=4,8,16");
  }
  SweepAxis axis;
  axis.key = spec.substr(0, equals);
  std::stringstream values(spec.substr(equals + 1));
  for (std::string value; std::getline(values, value, ',');) {
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    if (!value.empty()) axis.values.push_back(value);
  }
  if (axis.values.empty()) {
    throw ConfigError("--sweep '" + spec + "' lists no values: write KEY=V1,V2,... e.g. --sweep train.credits=1,3");
  }
  return axis;
}

std::vector<Point> grid(const std::vector<SweepAxis>& axes) {
  std::vector<Point> points{Point{}};
  for (const SweepAxis& axis : axes) {
    std::vector<Point> next;
    for (const Point& point : points) {
      for (const std::string& value : axis.values) {
        Point extended = point;
        extended.emplace_back(axis.key, value);
        next.push_back(std::move(extended));
      }
    }
    points = std::move(next);
  }
  return points;
}

Point shape_key(const Point& point) {
  static const char* feed_only[] = {"train.credits", "train.read_ahead", "train.reader_threads"};
  Point key;
  for (const Setting& setting : point) {
    if (std::find_if(std::begin(feed_only), std::end(feed_only),
                     [&](const char* k) { return setting.first == k; }) == std::end(feed_only)) {
      key.push_back(setting);
    }
  }
  return key;
}

std::string describe(const Point& point) {
  std::string text;
  for (const Setting& setting : point) text += (text.empty() ? "" : " ") + setting.first + "=" + setting.second;
  return text.empty() ? "(defaults)" : text;
}

RunMeasurement read_run(const fs::path& run_dir) {
  RunMeasurement result;
  const fs::path ranks = run_dir / "ranks";
  if (!fs::is_directory(ranks)) {
    result.error = "no " + ranks.string() + " (the run did not finish)";
    return result;
  }
  try {
    for (const auto& entry : fs::directory_iterator(ranks)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
      std::ifstream in(entry.path());
      const json rank = json::parse(in);
      if (rank.contains("peak_rss_bytes") && rank["peak_rss_bytes"].is_number()) {
        const int64_t rss = rank["peak_rss_bytes"].get<int64_t>();
        result.peak_rss_bytes = std::max(result.peak_rss_bytes.value_or(0), rss);
      }
      if (!rank.contains("steady_padded_frames_per_second")) continue;  // a data rank
      ++result.model_ranks;
      result.frames_per_s += rank["steady_padded_frames_per_second"].get<double>();
      const double wall = rank.value("wall_seconds", 0.0);
      if (wall > 0) {
        result.input_wait_fraction =
            std::max(result.input_wait_fraction, rank.value("input_wait_seconds", 0.0) / wall);
      }
    }
  } catch (const std::exception& error) {
    result.error = "unreadable rank file in " + ranks.string() + ": " + error.what();
    return result;
  }
  if (result.model_ranks == 0) {
    result.error = "no model rank's file in " + ranks.string();
    return result;
  }
  result.ok = true;
  return result;
}

Spread spread_of(const std::vector<double>& values) {
  Spread s;
  if (values.empty()) return s;
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.count = static_cast<int>(values.size());
  return s;
}

Spread PointResult::frames_per_s() const {
  std::vector<double> values;
  for (const auto& run : runs) {
    if (run.ok) values.push_back(run.frames_per_s);
  }
  return spread_of(values);
}

Spread PointResult::efficiency() const {
  std::vector<double> values;
  if (!replay || !replay->ok || replay->frames_per_s <= 0) return spread_of(values);
  for (const auto& run : runs) {
    if (run.ok) values.push_back(run.frames_per_s / replay->frames_per_s);
  }
  return spread_of(values);
}

Spread PointResult::input_wait() const {
  std::vector<double> values;
  for (const auto& run : runs) {
    if (run.ok) values.push_back(run.input_wait_fraction);
  }
  return spread_of(values);
}

std::optional<int64_t> PointResult::peak_rss_bytes() const {
  std::optional<int64_t> peak;
  for (const auto& run : runs) {
    if (run.ok && run.peak_rss_bytes) peak = std::max(peak.value_or(0), *run.peak_rss_bytes);
  }
  return peak;
}

std::string yaml_snippet(const Point& point) {
  // Settings are "section.key": group them by section, in the order they appear.
  std::vector<std::string> sections;
  std::map<std::string, std::vector<Setting>> by_section;
  for (const Setting& setting : point) {
    const size_t dot = setting.first.find('.');
    const std::string section = dot == std::string::npos ? setting.first : setting.first.substr(0, dot);
    const std::string key = dot == std::string::npos ? setting.first : setting.first.substr(dot + 1);
    if (by_section.find(section) == by_section.end()) sections.push_back(section);
    by_section[section].emplace_back(key, setting.second);
  }
  std::string yaml;
  for (const std::string& section : sections) {
    yaml += section + ":\n";
    for (const Setting& setting : by_section[section]) yaml += "  " + setting.first + ": " + setting.second + "\n";
  }
  return yaml;
}

Recommendation recommend(const std::vector<PointResult>& results) {
  Recommendation r;
  std::vector<int> measured;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].frames_per_s().count > 0) measured.push_back(static_cast<int>(i));
  }
  if (measured.empty()) {
    r.reason = "no point finished: no recommendation";
    return r;
  }
  if (measured.size() == 1) {
    r.reason = "only one point measured: nothing to compare";
    return r;
  }
  int best = measured.front();
  for (int i : measured) {
    if (results[i].frames_per_s().mean > results[best].frames_per_s().mean) best = i;
  }
  const Spread best_spread = results[best].frames_per_s();
  // Two runs say little about a spread on a shared machine: ask for three before choosing.
  for (int i : measured) {
    if (results[i].frames_per_s().count < 3) {
      r.reason = "no recommendation: " + describe(results[i].point) + " has " +
                 std::to_string(results[i].frames_per_s().count) +
                 " successful run(s); repeat every point 3 or more times (--repeat 3) to see the spread before choosing";
      return r;
    }
  }
  for (int i : measured) {
    if (i == best) continue;
    const Spread other = results[i].frames_per_s();
    if (other.max >= best_spread.min) {
      char text[256];
      std::snprintf(text, sizeof(text),
                    "no recommendation: the best point (%s, %.0f-%.0f frames/s) overlaps %s (%.0f-%.0f frames/s); "
                    "the differences are within the run-to-run spread",
                    describe(results[best].point).c_str(), best_spread.min, best_spread.max,
                    describe(results[i].point).c_str(), other.min, other.max);
      r.reason = text;
      return r;
    }
  }
  r.made = true;
  r.best = best;
  r.reason = "its slowest repeat is faster than every other point's fastest";
  r.yaml = yaml_snippet(results[best].point);
  return r;
}

namespace {

std::string range(const Spread& s, const char* format, double scale = 1.0) {
  if (s.count == 0) return "-";
  char low[32], high[32];
  std::snprintf(low, sizeof(low), format, s.min * scale);
  std::snprintf(high, sizeof(high), format, s.max * scale);
  return s.count == 1 || std::string(low) == high ? std::string(low) : std::string(low) + "-" + high;
}

}  // namespace

std::string format_table(const std::vector<PointResult>& results) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-40s %6s %16s %12s %12s %14s %12s\n", "point", "runs", "mel frames/s",
                "replay f/s", "efficiency", "input wait %", "peak RSS");
  out << line;
  for (const PointResult& result : results) {
    int ok = 0;
    for (const auto& run : result.runs) ok += run.ok ? 1 : 0;
    const auto rss = result.peak_rss_bytes();
    char rss_text[32] = "-";
    if (rss) std::snprintf(rss_text, sizeof(rss_text), "%.0f MiB", static_cast<double>(*rss) / (1 << 20));
    char replay_text[32] = "-";
    if (result.replay && result.replay->ok) std::snprintf(replay_text, sizeof(replay_text), "%.0f", result.replay->frames_per_s);
    std::snprintf(line, sizeof(line), "%-40s %3d/%-2zu %16s %12s %12s %14s %12s\n", describe(result.point).c_str(), ok,
                  result.runs.size(), range(result.frames_per_s(), "%.0f").c_str(), replay_text,
                  range(result.efficiency(), "%.3f").c_str(), range(result.input_wait(), "%.1f", 100.0).c_str(),
                  rss_text);
    out << line;
  }
  out << "mel frames/s: padded mel frames per second summed over the model ranks, after a warm-up (min-max over the repeats)\n"
         "efficiency: each repeat's frames/s / the same batch shapes replayed from memory (train.replay_from_memory), 1.0 = the feed costs nothing\n"
         "input wait %: the largest share of a model rank's wall time spent waiting for a batch; peak RSS: largest ru_maxrss of any rank (- when the rank files lack peak_rss_bytes)\n";
  return out.str();
}

namespace {

std::string quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// One `sluice train` run into run_dir; its output goes to run_dir.log. Returns the exit code.
int train_once(const SweepOptions& options, const Point& point, bool replay, const fs::path& run_dir) {
  fs::remove_all(run_dir);
  std::string command;
  if (options.ranks > 1) {
    command += quote(options.mpirun);
    for (const auto& arg : options.mpirun_args) command += " " + quote(arg);
    command += " -np " + std::to_string(options.ranks) + " ";
  }
  command += quote(options.sluice.string()) + " train --cache " + quote(options.cache.string()) + " --run-dir " +
             quote(run_dir.string()) + " --steps " + std::to_string(options.steps);
  if (!options.config_file.empty()) command += " -c " + quote(options.config_file);
  // No validation, checkpoints or loss lines inside the measured steps.
  for (const char* quiet : {"train.validation_every=0", "train.checkpoint_every=0", "train.log_every=1000000"}) {
    command += " --set " + std::string(quiet);
  }
  for (const auto& override_text : options.overrides) command += " --set " + quote(override_text);
  for (const Setting& setting : point) command += " --set " + quote(setting.first + "=" + setting.second);
  if (replay) command += " --set train.replay_from_memory=true";
  command += " >" + quote(run_dir.string() + ".log") + " 2>&1";
  const int status = std::system(command.c_str());
  // system() ignores SIGINT in this process while the child runs: a Ctrl-C shows up here, and
  // ends the sweep instead of moving on to the next run.
  if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGQUIT)) {
    throw Error(ErrorKind::internal, "bench sweep interrupted during the run in " + run_dir.string());
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

RunMeasurement measure(const SweepOptions& options, const Point& point, bool replay, const fs::path& run_dir) {
  const auto start = std::chrono::steady_clock::now();
  const int code = train_once(options, point, replay, run_dir);
  RunMeasurement result = read_run(run_dir);
  if (code != 0) {
    result.ok = false;
    result.error = "exit code " + std::to_string(code) + "; see " + run_dir.string() + ".log";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.ok) {
    std::printf("  %-8s %-40s %10.0f frames/s  wait %5.1f%%  (%.0f s)\n", replay ? "replay" : "feed",
                describe(point).c_str(), result.frames_per_s, 100.0 * result.input_wait_fraction, seconds);
  } else {
    std::printf("  %-8s %-40s FAILED: %s\n", replay ? "replay" : "feed", describe(point).c_str(), result.error.c_str());
  }
  std::fflush(stdout);
  return result;
}

}  // namespace

int run_sweep(const SweepOptions& options) {
  if (!fs::exists(options.cache / "manifest.json")) {
    throw ConfigError("--cache " + options.cache.string() +
                      ": no manifest.json (not a finished cache); prepare one with `sluice prep`");
  }
  if (options.ranks < 1 || options.steps < 1 || options.repeat < 1) {
    throw ConfigError("--np, --steps and --repeat must be at least 1");
  }
  fs::create_directories(options.scratch);
  const std::vector<Point> points = grid(options.axes);
  std::printf("sluice bench sweep: %zu point(s) x %d repeat(s), %lld steps each, %d rank(s), cache %s, runs in %s\n",
              points.size(), options.repeat, static_cast<long long>(options.steps), options.ranks,
              options.cache.c_str(), options.scratch.c_str());
  std::fflush(stdout);
  std::vector<PointResult> results;
  std::map<Point, RunMeasurement> replays;
  bool all_ok = true;
  for (size_t p = 0; p < points.size(); ++p) {
    PointResult result;
    result.point = points[p];
    if (options.replay_baseline) {
      const Point key = shape_key(points[p]);
      auto found = replays.find(key);
      if (found == replays.end()) {
        found = replays.emplace(key, measure(options, key, true, options.scratch / ("replay-" + std::to_string(replays.size()))))
                    .first;
        all_ok = all_ok && found->second.ok;
      }
      result.replay = found->second;
    }
    // Repeats interleaved with nothing else: each point's repeats run back to back.
    for (int r = 0; r < options.repeat; ++r) {
      const fs::path run_dir = options.scratch / ("point-" + std::to_string(p) + "-run-" + std::to_string(r));
      result.runs.push_back(measure(options, points[p], false, run_dir));
      all_ok = all_ok && result.runs.back().ok;
    }
    results.push_back(std::move(result));
  }
  std::printf("\n%s\n", format_table(results).c_str());
  const Recommendation recommendation = recommend(results);
  if (recommendation.made) {
    std::printf("recommended (%s):\n%s", recommendation.reason.c_str(), recommendation.yaml.c_str());
  } else {
    std::printf("%s\n", recommendation.reason.c_str());
  }
  if (!options.keep_runs && all_ok) fs::remove_all(options.scratch);
  return all_ok ? 0 : 1;
}

}  // namespace sluice::benchmark
