#pragma once
// `sluice bench sweep`: end-to-end training runs on the real setup, one per point of a grid of
// settings, each repeated to show its spread, with an in-run baseline (train.replay_from_memory)
// per batch shape, and a recommendation only where the best point beats the others beyond that
// spread.
//
// Each run is a child process: `mpirun -np N <sluice> train ...` (N >= 2) or `<sluice> train`
// (N = 1), into its own scratch run directory; the numbers come from RUN_DIR/ranks/rank-N.json.
// The pure parts (parsing, the grid, reading a run, spreads, the recommendation, the table) are
// separate functions and unit-tested.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::benchmark {

// One --sweep: a setting and the values it takes ("train.batch_size=4,8,16").
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};
// Throws ConfigError naming the option for a malformed spec (no '=', no values).
SweepAxis parse_sweep(const std::string& spec);

using Setting = std::pair<std::string, std::string>;
using Point = std::vector<Setting>;
// Every combination of the axes' values, the first axis varying slowest.
std::vector<Point> grid(const std::vector<SweepAxis>& axes);
// The settings of `point` that change what the model ranks compute (everything but the feed's
// own settings: train.credits, train.read_ahead, train.reader_threads): points with the same key
// share one replay baseline.
Point shape_key(const Point& point);
std::string describe(const Point& point);  // "train.batch_size=8 train.credits=3"

// What one finished run measured.
struct RunMeasurement {
  bool ok = false;
  std::string error;             // when !ok: why (exit code, missing rank files)
  int model_ranks = 0;
  double frames_per_s = 0.0;     // sum over model ranks of steady_padded_frames_per_second
  double input_wait_fraction = 0.0;  // max over model ranks of input_wait_seconds / wall_seconds
  std::optional<int64_t> peak_rss_bytes;  // max over ranks of "peak_rss_bytes" when the files have it
};
// Reads RUN_DIR/ranks/rank-*.json. Never throws: a problem is returned in `error`.
RunMeasurement read_run(const std::filesystem::path& run_dir);

struct Spread {
  double min = 0.0, max = 0.0, mean = 0.0;
  int count = 0;
};
Spread spread_of(const std::vector<double>& values);

struct PointResult {
  Point point;
  std::vector<RunMeasurement> runs;   // the repeats with the real feed
  std::optional<RunMeasurement> replay;  // the baseline of this point's shape
  Spread frames_per_s() const;        // over the successful repeats
  Spread efficiency() const;          // each repeat's frames/s / the replay's frames/s
  Spread input_wait() const;
  std::optional<int64_t> peak_rss_bytes() const;  // max over repeats
};

struct Recommendation {
  bool made = false;
  int best = -1;        // index into the results, when made
  std::string reason;   // why (or why not)
  std::string yaml;     // the best point's settings as a YAML snippet, when made
};
// The point with the highest mean frames/s is recommended only if every point has 3 or more
// successful repeats and the best one's slowest repeat is faster than every other point's fastest
// repeat (the spreads do not overlap). Pure.
Recommendation recommend(const std::vector<PointResult>& results);

std::string format_table(const std::vector<PointResult>& results);
std::string yaml_snippet(const Point& point);

struct SweepOptions {
  std::filesystem::path sluice;     // the sluice binary to run
  std::filesystem::path cache;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args = {"--bind-to", "none", "--oversubscribe"};
  int ranks = 1;
  int64_t steps = 40;
  int repeat = 3;
  bool replay_baseline = true;
  std::vector<SweepAxis> axes;
  std::string config_file;           // -c, passed through
  std::vector<std::string> overrides;  // --set, passed through (before the point's settings)
  std::filesystem::path scratch;     // run directories go here (created)
  bool keep_runs = false;
};

// Runs the sweep and prints progress, the table and the recommendation to stdout. 0 when every
// run succeeded, 1 otherwise (the table then shows the failed runs).
int run_sweep(const SweepOptions& options);

}  // namespace sluice::benchmark
