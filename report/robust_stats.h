#pragma once
// The robust statistics the verdict rules are written in (docs/report.md): percentiles, median
// absolute deviation, modified z-scores and autocorrelation. Plain functions over doubles.
#include <cstddef>
#include <functional>
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

// median() of n values given the k-th smallest of them (0-based), for samples held some other way.
double median_of_ranked(size_t n, const std::function<double(size_t)>& kth);

// A pooled sample asked for its median and MAD with one member's values left out, without
// copying the pool. The straggler rules compare each rank with all the OTHER ranks pooled: done by
// copying, R ranks of S items cost R copies of R x S values (minutes at 4,096 ranks); here a rank
// costs a few binary searches of the sorted pool. Same answers as median() and
// median_absolute_deviation() on the copy (the MAD to within 1e-15 of the pool's range).
class LeaveOutSample {
 public:
  explicit LeaveOutSample(std::vector<double> pool);
  // `left_out`: sorted, and a sub-multiset of the pool (the member's own values). 0 when nothing
  // is left.
  double median_without(const std::vector<double>& left_out) const;
  double mad_without(const std::vector<double>& left_out, double center) const;
  size_t size() const { return pool_.size(); }

 private:
  std::vector<double> pool_;  // sorted
  double kth_without(const std::vector<double>& left_out, size_t k) const;
  double kth_distance_without(const std::vector<double>& left_out, double center, size_t k) const;
};

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
