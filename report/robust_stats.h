#pragma once
// The robust statistics the verdict rules are written in (docs/report.md): percentiles, median
// absolute deviation, modified z-scores and autocorrelation. Plain functions over doubles.
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::report {

// p in [0, 100], linear interpolation between closest ranks; 0 for an empty sample.
double percentile(std::vector<double> values, double p);
double median(std::vector<double> values);
// Median of |x - center|.
double median_absolute_deviation(const std::vector<double>& values, double center);
// Iglewicz and Hoaglin's modified z-score 0.6745 (x - median) / MAD. `mad` must be > 0.
double modified_z(double x, double median_value, double mad);
// Sample autocorrelation at `lag` (mean removed, normalised by the lag-0 sum); 0 when undefined.
double autocorrelation(const std::vector<double>& values, size_t lag);

// What every table row shows about a sample of durations (seconds).
struct Distribution {
  size_t count = 0;
  double total = 0;
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
  double max = 0;

  static Distribution of(const std::vector<double>& values);
  nlohmann::json to_json() const;
};

}  // namespace sluice::report
