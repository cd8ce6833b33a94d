#pragma once
// Whether each rank got the CPU it wanted, from the timeline's `resources` (timing/cpu_watch.h):
// the intervals in which no thread of the process ran (stopped by a signal, throttled by a cgroup
// CPU quota, starved by other processes), its CPU time, faults and context switches. A rank that
// did not run makes every stage it was in look slow; the verdict names it instead of the stage.
//
// Rule (docs/report.md, "Descheduled"): over the model ranks' steady window (each rank's whole
// life when there is none), ran = 1 - stalled seconds / window. A rank is descheduled when
// ran < descheduled_ran_below and, when other ranks were measured, ran is at least
// descheduled_margin below the median of theirs (a machine that starves every rank alike is
// not one rank's fault; it still shows in every rank's row). A rank is also descheduled when its
// cgroup has a CPU quota, it used at least quota_used_share of it on average and the group was
// throttled at least quota_throttled_share of the rank's wall time: a quota holds a rank back
// while it wants the CPU, which the stall watch sees only in part (it is late only when it wakes
// inside a throttled period).
//
// Storage reads (resources.storage_reads): the intervals in which the process fetched bytes from a
// block device, each with the CPU time it used, clipped to the same window (an interval counts by
// the share of it inside): storage_read_bytes, and storage_cpu_cores, how busy the process's CPUs
// were while it fetched (report/stall_verdicts.cpp decides from these whether readers waited for
// the device). The kernel counts a read when it is submitted, so these intervals are when reads
// started, not how long the device took: the rate is taken against the readers' cache_read time.
#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/rank_role.h"
#include "timing/timeline_file.h"

namespace sluice::report {

struct StallVerdict;
struct TrainAnalysis;

inline constexpr double descheduled_ran_below = 0.6;
inline constexpr double descheduled_margin = 0.2;
inline constexpr double quota_used_share = 0.8;
inline constexpr double quota_throttled_share = 0.2;

struct RankCpu {
  int rank = 0;
  std::string name;  // describe_rank
  std::string host;
  RankRole role;
  bool measured = false;          // the timeline has `resources`
  double window_seconds = 0;      // the window the stall numbers cover
  double stalled_seconds = 0;     // stall intervals clipped to the window
  int64_t stalls = 0;             // stall intervals overlapping the window
  double longest_stall_seconds = 0;
  double ran_fraction = 1;        // 1 - stalled / window
  double others_ran_fraction = 1; // median of the other measured ranks' ran_fraction
  double cpu_cores_mean = 0;      // CPU seconds / wall seconds over the process's life
  double cpu_seconds = 0;
  double wall_seconds = 0;
  std::optional<double> quota_cores;  // its cgroup's CPU quota, when one is set
  double throttled_seconds = 0;       // time its cgroup was throttled
  int64_t minor_faults = 0, major_faults = 0, voluntary_switches = 0, involuntary_switches = 0;
  bool descheduled = false;
  bool held_by_quota = false;  // the quota rule above
  bool storage_measured = false;     // the timeline has storage_reads
  int64_t storage_read_bytes = 0;    // fetched from block devices in the window
  double storage_read_seconds = 0;   // of the window, inside intervals with reads
  double storage_cpu_seconds = 0;    // CPU the process used in those intervals

  double storage_cpu_cores() const { return storage_read_seconds > 0 ? storage_cpu_seconds / storage_read_seconds : 0; }

  double throttled_share() const { return wall_seconds > 0 ? throttled_seconds / wall_seconds : 0; }

  nlohmann::json to_json() const;
};

// `aligned`: a timeline on the reference clock (align_to_reference moves its stall and
// storage-read intervals too). start_ns >= end_ns means the rank's whole life.
RankCpu analyze_rank_cpu(const timing::RankTimeline& aligned, int64_t start_ns, int64_t end_ns);

// The stall and storage-read intervals of a rank (aligned) and the extent of its spans, taken
// out of its timeline so that the streaming analysis can judge it after the spans are dropped.
struct RankStalls {
  std::vector<std::pair<int64_t, int64_t>> stalls;
  // storage_reads.intervals on the reference clock: start, end, bytes, CPU ns.
  std::vector<std::array<int64_t, 4>> storage_reads;
  bool storage_measured = false;
  int64_t spans_start = INT64_MAX, spans_end = INT64_MIN;
  // Every interval of the timeline is here; false after keep_overlapping, when a whole-life
  // window (no steady window) takes the totals `resources` counted instead.
  bool complete = true;
  // The intervals wholly inside [inside_from_ns, inside_to_ns], counted and dropped (summarise):
  // every window the analysis judges a rank on holds that span, so they count whole in any of them.
  int64_t inside_from_ns = INT64_MAX, inside_to_ns = INT64_MIN;
  int64_t inside_stalls = 0, inside_stalled_ns = 0, inside_longest_ns = 0;

  // of() copies the intervals; take() moves them out of `aligned` (its stalls and storage_reads
  // are left empty).
  static RankStalls of(const timing::RankTimeline& aligned);
  static RankStalls take(timing::RankTimeline& aligned);
  // Drops (and frees) the intervals that do not overlap [from_ns, to_ns]; those that do are kept
  // whole, so that any window inside [from_ns, to_ns] is judged as with every interval.
  void keep_overlapping(int64_t from_ns, int64_t to_ns);
  // Counts the stall intervals wholly inside [from_ns, to_ns] into the inside_ totals and frees
  // them: a loaded machine's timelines hold thousands of 5 ms stalls a rank, 16 bytes each, which
  // were most of the report's memory at 16,384 ranks. A rank's own steady steps are such a span (the
  // job's steady window, and its whole life, hold them). Once only: a second call throws.
  void summarise(int64_t from_ns, int64_t to_ns);
};

// The same as above for a timeline whose spans and stalls were taken out into `stalls`.
RankCpu analyze_rank_cpu(const timing::RankTimeline& identity, const RankStalls& stalls, int64_t start_ns,
                         int64_t end_ns);

// Sets others_ran_fraction and descheduled on every rank by the rule above.
void judge_descheduled(std::vector<RankCpu>& ranks);

// The descheduled verdict of one rank (kind "descheduled", HIGH), its cause (a cgroup quota that
// throttled it, or stopped / starved) and what its role's neighbours paid for it.
StallVerdict descheduled_verdict(const TrainAnalysis& analysis, const RankCpu& cpu);

// "rank 0 ran 26% of the wall time: starved of CPU or stopped" (the cause's short form).
std::string descheduled_cause(const RankCpu& cpu);

}  // namespace sluice::report
