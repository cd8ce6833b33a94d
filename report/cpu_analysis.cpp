#include "report/cpu_analysis.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <spdlog/fmt/fmt.h>

#include "report/robust_stats.h"
#include "report/run_analysis.h"
#include "report/stall_verdicts.h"

namespace sluice::report {
namespace {

using nlohmann::json;

// Shares in whole percent: the OS's sampling is no finer.
std::string whole_percent(double fraction) { return fmt::format("{:.0f}%", 100 * fraction); }

int64_t number_or(const json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : fallback;
}

double real_or(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// The extent of the rank's spans, the window when the caller gives none.
std::pair<int64_t, int64_t> span_extent(const timing::RankTimeline& t) {
  int64_t start = INT64_MAX, end = INT64_MIN;
  for (const auto& s : t.spans) {
    start = std::min(start, s.start_ns);
    end = std::max(end, s.end_ns);
  }
  return {start, end};
}

bool quota_throttled(const RankCpu& c) {
  // The quota is the cause when it holds the rank back, or its throttling accounts for a good part
  // of the stalls.
  return c.held_by_quota || (c.quota_cores && c.throttled_seconds > 0.25 * std::max(c.stalled_seconds, 1e-3));
}

// The storage-read intervals inside [start_ns, end_ns) (the whole record when there is no window),
// each counted by the share of it inside.
void clip_storage_reads(RankCpu& c, const RankStalls& stalls, int64_t start_ns, int64_t end_ns) {
  c.storage_measured = stalls.storage_measured;
  double bytes = 0, cpu_ns = 0, inside_ns = 0;
  for (const auto& [from, to, read, cpu] : stalls.storage_reads) {
    if (to <= from) continue;
    const int64_t a = start_ns < end_ns ? std::max(from, start_ns) : from;
    const int64_t b = start_ns < end_ns ? std::min(to, end_ns) : to;
    if (b <= a) continue;
    const double share = static_cast<double>(b - a) / static_cast<double>(to - from);
    bytes += share * static_cast<double>(read);
    cpu_ns += share * static_cast<double>(cpu);
    inside_ns += static_cast<double>(b - a);
  }
  c.storage_read_bytes = static_cast<int64_t>(bytes);
  c.storage_read_seconds = inside_ns * 1e-9;
  c.storage_cpu_seconds = cpu_ns * 1e-9;
}

}  // namespace

json RankCpu::to_json() const {
  return {{"rank", rank},
          {"name", name},
          {"role", role.recorded},
          {"measured", measured},
          {"window_seconds", window_seconds},
          {"stalled_seconds", stalled_seconds},
          {"stalls", stalls},
          {"longest_stall_seconds", longest_stall_seconds},
          {"ran_fraction", ran_fraction},
          {"others_ran_fraction", others_ran_fraction},
          {"cpu_cores_mean", cpu_cores_mean},
          {"cpu_seconds", cpu_seconds},
          {"wall_seconds", wall_seconds},
          {"quota_cores", quota_cores ? json(*quota_cores) : json(nullptr)},
          {"throttled_seconds", throttled_seconds},
          {"minor_faults", minor_faults},
          {"major_faults", major_faults},
          {"voluntary_switches", voluntary_switches},
          {"involuntary_switches", involuntary_switches},
          {"descheduled", descheduled},
          {"storage_read_bytes", storage_measured ? json(storage_read_bytes) : json(nullptr)},
          {"storage_read_seconds", storage_read_seconds},
          {"storage_cpu_cores", storage_cpu_cores()}};
}

RankStalls RankStalls::of(const timing::RankTimeline& aligned) {
  RankStalls r;
  std::tie(r.spans_start, r.spans_end) = span_extent(aligned);
  r.stalls = aligned.stalls;
  r.storage_reads = aligned.storage_reads;
  r.storage_measured = aligned.resources.is_object() && aligned.resources.value("storage_reads", json()).is_object();
  return r;
}

RankStalls RankStalls::take(timing::RankTimeline& aligned) {
  RankStalls r;
  std::tie(r.spans_start, r.spans_end) = span_extent(aligned);
  r.stalls = std::move(aligned.stalls);
  r.storage_reads = std::move(aligned.storage_reads);
  aligned.stalls.clear();
  aligned.storage_reads.clear();
  r.storage_measured = aligned.resources.is_object() && aligned.resources.value("storage_reads", json()).is_object();
  return r;
}

void RankStalls::keep_overlapping(int64_t from_ns, int64_t to_ns) {
  const auto outside = [&](int64_t start, int64_t end) { return end < from_ns || start > to_ns; };
  stalls.erase(std::remove_if(stalls.begin(), stalls.end(), [&](const auto& s) { return outside(s.first, s.second); }),
               stalls.end());
  storage_reads.erase(std::remove_if(storage_reads.begin(), storage_reads.end(),
                                     [&](const auto& r) { return outside(r[0], r[1]); }),
                      storage_reads.end());
  // Erasing keeps the capacity: copy into exact-size vectors so that the memory is given back.
  stalls = std::vector<std::pair<int64_t, int64_t>>(stalls.begin(), stalls.end());
  storage_reads = std::vector<std::array<int64_t, 4>>(storage_reads.begin(), storage_reads.end());
  complete = false;
}

void RankStalls::summarise(int64_t from_ns, int64_t to_ns) {
  if (inside_from_ns <= inside_to_ns) throw std::logic_error("RankStalls::summarise called twice");
  if (from_ns > to_ns) return;
  inside_from_ns = from_ns;
  inside_to_ns = to_ns;
  const auto inside = [&](const std::pair<int64_t, int64_t>& s) { return s.first >= from_ns && s.second <= to_ns; };
  for (const auto& s : stalls) {
    if (!inside(s) || s.second <= s.first) continue;
    ++inside_stalls;
    inside_stalled_ns += s.second - s.first;
    inside_longest_ns = std::max(inside_longest_ns, s.second - s.first);
  }
  stalls.erase(std::remove_if(stalls.begin(), stalls.end(), inside), stalls.end());
  stalls = std::vector<std::pair<int64_t, int64_t>>(stalls.begin(), stalls.end());  // the memory given back
}

RankCpu analyze_rank_cpu(const timing::RankTimeline& aligned, int64_t start_ns, int64_t end_ns) {
  return analyze_rank_cpu(aligned, RankStalls::of(aligned), start_ns, end_ns);
}

RankCpu analyze_rank_cpu(const timing::RankTimeline& aligned, const RankStalls& stalls, int64_t start_ns,
                         int64_t end_ns) {
  RankCpu c;
  c.rank = aligned.rank;
  c.name = describe_rank(aligned);
  c.host = aligned.host;
  c.role = RankRole::of(aligned.role);
  const json& r = aligned.resources;
  if (!r.is_object()) return c;
  c.measured = true;
  c.wall_seconds = real_or(r, "wall_seconds", 0);
  c.cpu_seconds = real_or(r, "cpu_user_seconds", 0) + real_or(r, "cpu_system_seconds", 0);
  c.cpu_cores_mean = real_or(r, "cpu_cores_mean", 0);
  c.minor_faults = number_or(r, "minor_faults", 0);
  c.major_faults = number_or(r, "major_faults", 0);
  c.voluntary_switches = number_or(r, "voluntary_switches", 0);
  c.involuntary_switches = number_or(r, "involuntary_switches", 0);
  const json cgroup = r.value("cgroup", json());
  if (cgroup.is_object()) {
    if (cgroup.value("quota_cores", json()).is_number()) c.quota_cores = cgroup["quota_cores"].get<double>();
    c.throttled_seconds = real_or(cgroup, "throttled_seconds", 0);
  }
  const bool whole_life = start_ns >= end_ns;
  if (whole_life) std::tie(start_ns, end_ns) = std::make_pair(stalls.spans_start, stalls.spans_end);
  if (start_ns >= end_ns || number_or(r, "stalls_dropped", 0) > 0 || (whole_life && !stalls.complete)) {
    // No window to clip to, or the oldest stalls were not kept (by the rank, or by the analysis,
    // which kept only those near its window): the whole life.
    c.window_seconds = c.wall_seconds;
    c.stalled_seconds = real_or(r, "stalled_seconds", 0);
    c.stalls = number_or(r, "stall_count", 0);
    c.longest_stall_seconds = real_or(r, "longest_stall_seconds", 0);
  } else {
    c.window_seconds = static_cast<double>(end_ns - start_ns) * 1e-9;
    int64_t stalled_ns = 0, longest_ns = 0;
    if (stalls.inside_from_ns <= stalls.inside_to_ns) {
      if (start_ns > stalls.inside_from_ns || end_ns < stalls.inside_to_ns) {
        throw std::logic_error("rank " + std::to_string(aligned.rank) + "'s stalls were summarised over a span " +
                               "the window does not hold");
      }
      c.stalls = stalls.inside_stalls;
      stalled_ns = stalls.inside_stalled_ns;
      longest_ns = stalls.inside_longest_ns;
    }
    for (const auto& [stall_start, stall_end] : stalls.stalls) {
      const int64_t from = std::max(start_ns, stall_start), to = std::min(end_ns, stall_end);
      if (to <= from) continue;
      stalled_ns += to - from;
      longest_ns = std::max(longest_ns, to - from);
      ++c.stalls;
    }
    // Summed in whole nanoseconds: the same total whichever intervals were summarised first.
    c.stalled_seconds = static_cast<double>(stalled_ns) * 1e-9;
    c.longest_stall_seconds = static_cast<double>(longest_ns) * 1e-9;
  }
  c.ran_fraction = c.window_seconds > 0 ? std::clamp(1.0 - c.stalled_seconds / c.window_seconds, 0.0, 1.0) : 1.0;
  clip_storage_reads(c, stalls, start_ns, end_ns);
  return c;
}

void judge_descheduled(std::vector<RankCpu>& ranks) {
  // The other ranks' median for each rank from one sorted pool (a copy of the others per rank was
  // quadratic in ranks: 16 million copies and 4,096 sorts at 4,096 ranks).
  std::vector<double> pool;
  for (const auto& o : ranks) {
    if (o.measured) pool.push_back(o.ran_fraction);
  }
  const size_t measured = pool.size();
  const LeaveOutSample all(std::move(pool));
  for (auto& c : ranks) {
    if (!c.measured) continue;
    const bool others = measured > 1;
    c.others_ran_fraction = others ? all.median_without({c.ran_fraction}) : 1.0;
    c.held_by_quota = c.quota_cores && *c.quota_cores > 0 && c.cpu_cores_mean >= quota_used_share * *c.quota_cores &&
                      c.throttled_share() >= quota_throttled_share;
    c.descheduled = c.held_by_quota || (c.ran_fraction < descheduled_ran_below &&
                                        (!others || c.ran_fraction <= c.others_ran_fraction - descheduled_margin));
  }
}

std::string descheduled_cause(const RankCpu& c) {
  if (quota_throttled(c)) {
    return fmt::format("rank {} was held to {:.2f} cores by its cgroup's CPU quota (throttled {} of the wall time, "
                       "stalled {} of the window)",
                       c.rank, *c.quota_cores, whole_percent(c.throttled_share()), whole_percent(1 - c.ran_fraction));
  }
  return fmt::format("rank {} ran {} of the wall time: starved of CPU or stopped", c.rank, whole_percent(c.ran_fraction));
}

StallVerdict descheduled_verdict(const TrainAnalysis& a, const RankCpu& c) {
  StallVerdict v(VerdictKind::descheduled, Severity::high, c.rank);
  const bool quota = quota_throttled(c);
  v.numbers = {{"rank", c.rank},
               {"host", c.host},
               {"role", c.role.recorded},
               {"cause", quota ? "cpu_quota" : "stopped_or_starved"},
               {"ran_fraction", c.ran_fraction},
               {"others_ran_fraction", c.others_ran_fraction},
               {"window_seconds", c.window_seconds},
               {"stalled_seconds", c.stalled_seconds},
               {"stalls", c.stalls},
               {"longest_stall_seconds", c.longest_stall_seconds},
               {"cpu_cores_mean", c.cpu_cores_mean},
               {"quota_cores", c.quota_cores ? json(*c.quota_cores) : json(nullptr)},
               {"throttled_seconds", c.throttled_seconds},
               {"throttled_share", c.throttled_share()},
               {"involuntary_switches", c.involuntary_switches},
               {"major_faults", c.major_faults}};
  v.summary = fmt::format("{} (the other ranks ran {}): {} ({}); {} stalls of up to {:.3f} s, {:.1f} s of the {:.1f} s "
                          "window; it used {:.2f} cores on average{}",
                          descheduled_cause(c), whole_percent(c.others_ran_fraction), c.name,
                          quota ? "throttled by its cgroup" : "no thread of it ran", c.stalls,
                          c.longest_stall_seconds, c.stalled_seconds, c.window_seconds, c.cpu_cores_mean,
                          quota ? fmt::format(", its cgroup throttled it {:.1f} s", c.throttled_seconds) : "");
  std::vector<int> feeds;
  for (const auto& t : a.timelines) {
    if (t.rank == c.rank) feeds = t.feeds;
  }
  const std::string who = c.role.kind == RoleKind::data ? fmt::format("its model ranks ({}) waited for batches it was not running "
                                                         "to make: neither the transport nor train.credits is the limit",
                                                         rank_list(feeds))
                                           : "every other model rank waits for it in the all-reduce";
  const std::string fix =
      quota ? fmt::format("raise or remove the CPU quota of its cgroup ({:.2f} cores: cpu.max or cpu.cfs_quota_us), or "
                          "give the job the cores it asks for (Slurm --cpus-per-task)",
                          *c.quota_cores)
            : fmt::format("find what stops or starves it on host {}: other processes on its cores (top; taskset -p), a "
                          "CPU quota, a debugger or job control sending SIGSTOP, memory pressure (major faults: {})",
                          c.host, c.major_faults);
  v.recommendation = who + "; " + fix;
  return v;
}

}  // namespace sluice::report
