#include "report/robust_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::report {

namespace {

// percentile() of values already sorted.
double percentile_of_sorted(const std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const double position = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

// percentile_of_sorted() of `values` as if sorted, for ascending p across calls: partitions
// values[from..) so that the order statistics it needs are in place, and moves `from` past those
// below them (they are not needed again).
double percentile_of_partitioned(std::vector<double>& values, size_t& from, double p) {
  if (values.empty()) return 0;
  const double position = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  const auto at = [&](size_t i) { return values.begin() + static_cast<std::ptrdiff_t>(i); };
  std::nth_element(at(std::min(from, below)), at(below), values.end());
  from = below;
  // Everything after `below` is not smaller than it: the next order statistic is their minimum.
  const double next = above == below ? values[below] : *std::min_element(at(above), values.end());
  return values[below] + fraction * (next - values[below]);
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return percentile_of_sorted(values, p);
}

double median(std::vector<double> values) { return percentile(std::move(values), 50); }

double median_absolute_deviation(const std::vector<double>& values, double center) {
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - center));
  return median(std::move(deviations));
}

double median_of_ranked(size_t n, const std::function<double(size_t)>& kth) {
  if (n == 0) return 0;
  const double position = 0.5 * static_cast<double>(n - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, n - 1);
  const double fraction = position - static_cast<double>(below);
  const double low = kth(below);
  return fraction == 0 ? low : low + fraction * (kth(above) - low);
}

namespace {

size_t count_at_most(const std::vector<double>& sorted, double value) {
  return static_cast<size_t>(std::upper_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
}

size_t count_below(const std::vector<double>& sorted, double value) {
  return static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
}

}  // namespace

LeaveOutSample::LeaveOutSample(std::vector<double> pool) : pool_(std::move(pool)) {
  std::sort(pool_.begin(), pool_.end());
}

double LeaveOutSample::kth_without(const std::vector<double>& left_out, size_t k) const {
  // The smallest pool index j with (pool values <= pool[j]) - (left-out values <= pool[j]) > k:
  // that count grows with j, so a binary search finds it.
  size_t low = 0, high = pool_.size() - 1;
  while (low < high) {
    const size_t mid = low + (high - low) / 2;
    if (count_at_most(pool_, pool_[mid]) - count_at_most(left_out, pool_[mid]) > k) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return pool_[low];
}

double LeaveOutSample::kth_distance_without(const std::vector<double>& left_out, double center, size_t k) const {
  // How many remaining values lie within `d` of the center; bisect d, then snap it to the
  // distance of an actual pool value.
  const auto within = [&](double d) {
    const auto in = [&](const std::vector<double>& v) { return count_at_most(v, center + d) - count_below(v, center - d); };
    return in(pool_) - in(left_out);
  };
  if (within(0) > k) return 0;
  double low = 0, high = std::max(std::fabs(pool_.front() - center), std::fabs(pool_.back() - center));
  for (int i = 0; i < 80 && high - low > 0; ++i) {
    const double mid = low + (high - low) / 2;
    if (mid <= low || mid >= high) break;
    (within(mid) > k ? high : low) = mid;
  }
  double snapped = 0;
  const size_t right = count_at_most(pool_, center + high);
  if (right > 0 && pool_[right - 1] >= center) snapped = std::max(snapped, pool_[right - 1] - center);
  const size_t left = count_below(pool_, center - high);
  if (left < pool_.size() && pool_[left] <= center) snapped = std::max(snapped, center - pool_[left]);
  return snapped;
}

double LeaveOutSample::median_without(const std::vector<double>& left_out) const {
  const size_t n = pool_.size() - std::min(pool_.size(), left_out.size());
  return median_of_ranked(n, [&](size_t k) { return kth_without(left_out, k); });
}

double LeaveOutSample::mad_without(const std::vector<double>& left_out, double center) const {
  const size_t n = pool_.size() - std::min(pool_.size(), left_out.size());
  return median_of_ranked(n, [&](size_t k) { return kth_distance_without(left_out, center, k); });
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
  // The report pools every model rank's steady steps, most of a million values at 4,096 ranks, for
  // each stage: the order statistics the three percentiles need are found by partitioning one copy
  // (linear) instead of sorting it. The same values as percentile() on a sorted copy.
  std::vector<double> partitioned = values;
  size_t from = 0;
  d.p50 = percentile_of_partitioned(partitioned, from, 50);
  d.p95 = percentile_of_partitioned(partitioned, from, 95);
  d.p99 = percentile_of_partitioned(partitioned, from, 99);
  d.max = *std::max_element(partitioned.begin() + static_cast<std::ptrdiff_t>(from), partitioned.end());
  return d;
}

nlohmann::json Distribution::to_json() const {
  return {{"count", count}, {"total", total}, {"mean", mean}, {"p50", p50},
          {"p95", p95},     {"p99", p99},     {"max", max}};
}

}  // namespace sluice::report
