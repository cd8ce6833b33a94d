#pragma once
// The verdict rules of docs/report.md, applied to a TrainAnalysis: input-bound, compute-bound,
// communication-bound, straggler, cyclic stall and hang. Each verdict carries the numbers it was
// decided on and a recommendation tied to them. The straggler and cyclic-stall detectors are
// plain functions so the prep report and the tests use them directly.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/rank_role.h"
#include "report/report_text.h"
#include "report/run_analysis.h"
#include "report/verdict_kind.h"

namespace sluice::report {

inline constexpr double input_bound_high = 0.20;
inline constexpr double input_bound_moderate = 0.05;
inline constexpr double compute_bound_input_below = 0.05;
inline constexpr double compute_bound_comm_below = 0.03;
inline constexpr double comm_bound_high = 0.15;
inline constexpr double comm_bound_moderate = 0.03;
// The all-reduce's cause (stall_verdicts.cpp, allreduce_cause): an exposed wait beyond this many
// times what the step's bytes take at the baseline is not bandwidth as measured; model ranks whose
// exposed waits per step are within this share of each other wait alike (no skew between them).
inline constexpr double allreduce_skew_ratio = 2.0;
inline constexpr double allreduce_even_share = 0.5;
inline constexpr double straggler_z = 3.5;
inline constexpr double straggler_min_excess = 0.05;     // of the role's step time
inline constexpr double straggler_min_item_share = 0.5;  // of the rank's steps
// The second straggler rule, for a rank whose own noise is large (a CPU quota throttles it in
// 100 ms periods): its median at least this many times the others' and its excess over them at
// least straggler_min_excess in straggler_consistent_share of its steps.
inline constexpr double straggler_min_ratio = 1.5;
inline constexpr double straggler_consistent_share = 0.8;
// Input-bound with cache_read the busiest data stage: the readers waited for the cache's storage
// (cause cache_storage, not too few reader threads) when, in the steady window, the data rank
// fetched from block devices at least storage_read_min_share of the bytes it sent (page-cache
// misses, not re-reads; a batch as sent is larger than as stored, and readahead fetches part of
// the window's bytes before it: 33% measured on a throttled loop device, ~0 from the page cache)
// and, in the intervals in which it fetched, its process used less than storage_wait_cpu_share of
// the CPU its readers' cache_read time would have used on CPU (reader lanes x cache_read fraction
// cores).
inline constexpr double storage_read_min_share = 0.10;
inline constexpr double storage_wait_cpu_share = 0.5;
inline constexpr double padding_waste_moderate = 0.10;  // of padded frames (model work)
inline constexpr double padding_waste_high = 0.30;
inline constexpr double spike_z = 3.5;
inline constexpr size_t cyclic_min_spikes = 3;
inline constexpr double cyclic_min_gap_share = 0.70;

struct StallVerdict {
  StallVerdict() = default;
  explicit StallVerdict(VerdictKind what, Severity grade = Severity::none, int named_rank = -1)
      : kind(what), severity(grade), rank(named_rank) {}

  VerdictKind kind = VerdictKind::no_verdict;
  Severity severity = Severity::none;
  std::string summary;   // one line with the numbers
  std::string recommendation;
  nlohmann::json numbers = nlohmann::json::object();
  int rank = -1;  // the rank named (straggler, hang), -1 when none
  // The role of the rank named, where the rule compares it with its role (straggler: its
  // numbers' "role" is this, written by the rule); unknown otherwise.
  RoleKind role = RoleKind::unknown;

  nlohmann::json to_json() const;
  std::string title() const;     // the kind as the report shows it: "input-bound"
  std::string headline() const;  // "input-bound HIGH: ..."
};

struct StragglerFinding {
  int rank = -1;
  size_t items = 0;                // steps (or rows) compared
  double flagged_share = 0;        // of them, the share over the threshold
  double rank_median = 0;          // seconds per item on this rank
  double role_median = 0;          // seconds per item on the other ranks of the role, pooled
  double median_excess = 0;        // rank_median - role_median
  double total_excess = 0;         // sum over items of max(0, value - role_median)
  double consistent_share = 0;     // items whose excess is at least the minimum (no z test)
  std::string rule = "z";          // "z": the modified z rule; "ratio": the consistent-ratio rule
};

// `per_rank`: each rank's per-item durations (busy seconds per step, seconds per row). A rank is a
// straggler when, against the pooled values of the OTHER ranks of its role (median, MAD), at
// least half its items have modified z > 3.5 and exceed that median by at least
// straggler_min_excess x `reference_seconds` (the role's step time). Pooling the other ranks'
// items keeps the rule meaningful with two or three ranks, where a median across ranks is not.
std::vector<StragglerFinding> find_stragglers(const std::map<int, std::vector<double>>& per_rank,
                                              double reference_seconds);

// The same rule for ranks that run the same steps in lockstep (model ranks: every step gives every
// rank a batch of the same bucket, so step-to-step variation is shared). Each rank's value in a step
// is compared with the median of the OTHER ranks in that step (residual e); the scale is the MAD of
// the other ranks' residuals, computed the same way; a step counts when modified z > 3.5 and
// e >= straggler_min_excess x `reference_seconds`. rank_median/role_median are the medians of the
// rank's and the others' values; median_excess is the median residual.
// With two ranks, the scale is the straggler's own noise mirrored, so a rank that is slow AND
// noisy escapes the z rule; it is a straggler too when its median is at least straggler_min_ratio
// x the others' and e >= the minimum excess in straggler_consistent_share of its steps (rule
// "ratio").
// `values`: one per rank and step (of a pair given twice, the last one given counts).
struct RankStepValue {
  int rank = 0;
  int64_t step = 0;
  double value = 0;
};
std::vector<StragglerFinding> find_step_stragglers(std::vector<RankStepValue> values, double reference_seconds);

struct CyclicStall {
  bool found = false;
  double threshold = 0;                // median + 3.5 x 1.4826 x MAD
  std::vector<int64_t> spike_steps;    // steps above the threshold
  int64_t period = 0;                  // L, the most common gap between spikes
  double gap_share = 0;                // gaps within L +- 1
  double autocorrelation = 0;          // of the series at lag L
  double autocorrelation_bound = 0;    // 3 / sqrt(N)
  double spike_excess_seconds = 0;     // median spike minus median step
  std::string series = "step";         // the series it was found in: "step" or a stage name
};

// `seconds[i]` belongs to `steps[i]`; consecutive entries are consecutive steps. A spike must also
// exceed the median by `min_excess` seconds (5% of the median step), so that noise on a nearly
// constant series (a stage that is almost always 0) is no spike.
CyclicStall find_cyclic_stall(const std::vector<double>& seconds, const std::vector<int64_t>& steps,
                              double min_excess);

// Every verdict that holds: HIGH first, then MODERATE, then ungraded; within a grade hang,
// descheduled, input, communication, straggler, cyclic, compute. Without enough steady steps: a single no_verdict (plus hang, which needs none).
std::vector<StallVerdict> train_verdicts(const TrainAnalysis& analysis);

// The padding verdict from RUN_DIR/padding.json (runtime/train/padding_summary.h): when at least
// padding_waste_moderate of the padded frames are padding, the share per bucket and overall and
// what raising train.n_buckets would save. nullopt below the threshold or without the file.
std::optional<StallVerdict> padding_verdict(const nlohmann::json& padding);

// The restarts verdict from RUN_DIR/restarts.json (`sluice supervise`, supervisor/supervisor.h):
// when the run was restarted, how often, why (the first faults named), the time lost from each
// fault to training again and the hosts left out; HIGH when the supervisor gave up, MODERATE
// otherwise. nullopt without restarts (restart_verdict.cpp).
std::optional<StallVerdict> restart_verdict(const nlohmann::json& restarts);

// Bytes per second the cache's storage delivered to data rank `d` while its readers read: the
// storage bytes in the window (`cpu`, the same rank's) over the time a reader lane spent in
// cache_read (lanes read side by side, so the device was busy at least that long). Not the bytes
// over the read intervals: the kernel counts a read when it is submitted, before a throttled or
// slow device serves it. 0 when the readers did not read.
double storage_bytes_per_second(const DataRankAnalysis& d, const RankCpu& cpu);

// A setting from a timeline's `settings` ("train.checkpoint_every"), flat or nested; null if absent.
nlohmann::json setting(const nlohmann::json& settings, const std::string& key);

}  // namespace sluice::report
