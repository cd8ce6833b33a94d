#include "report/robust_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::report {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double position = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

double median(std::vector<double> values) { return percentile(std::move(values), 50); }

double median_absolute_deviation(const std::vector<double>& values, double center) {
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - center));
  return median(std::move(deviations));
}

double modified_z(double x, double median_value, double mad) { return 0.6745 * (x - median_value) / mad; }

double autocorrelation(const std::vector<double>& values, size_t lag) {
  if (values.size() <= lag + 1) return 0;
  const double mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  double denominator = 0;
  for (double v : values) denominator += (v - mean) * (v - mean);
  if (denominator <= 0) return 0;
  double numerator = 0;
  for (size_t i = 0; i + lag < values.size(); ++i) numerator += (values[i] - mean) * (values[i + lag] - mean);
  return numerator / denominator;
}

Distribution Distribution::of(const std::vector<double>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  d.total = std::accumulate(values.begin(), values.end(), 0.0);
  d.mean = d.total / static_cast<double>(values.size());
  d.p50 = percentile(values, 50);
  d.p95 = percentile(values, 95);
  d.p99 = percentile(values, 99);
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

nlohmann::json Distribution::to_json() const {
  return {{"count", count}, {"total", total}, {"mean", mean}, {"p50", p50},
          {"p95", p95},     {"p99", p99},     {"max", max}};
}

}  // namespace sluice::report
